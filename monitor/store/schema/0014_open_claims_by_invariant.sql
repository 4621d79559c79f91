-- A claim asks whether an earlier slot of its invariant is still open (claims.py). With
-- only slot_claims_open (by lease), a generic plan read every open claim of the fleet for
-- each claim: store work grew with the square of the slots due at once (bench/README.md,
-- "The fleet at scale"). This index answers it from the invariant's own open claims.
CREATE INDEX slot_claims_open_by_invariant ON slot_claims (invariant, slot)
    WHERE finished_at IS NULL;
