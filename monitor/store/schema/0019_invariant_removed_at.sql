-- When the daemon last found an invariant's file gone (StateStore.retire, for every removed
-- file, whether it held or not): a run that started before it is not stored (its file was
-- removed while it ran), and `status` leaves out an invariant removed since its last run.
-- NULL: never removed, or removed before this step (then only a retired incident says so).
ALTER TABLE invariant_state ADD COLUMN removed_at TEXT;
