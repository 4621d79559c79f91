#!/usr/bin/env bash
# What is shipped must build, render and run, proved by doing it (CI runs this before the
# suite):
#   1. every kustomization under deploy/ rendered by kustomize itself (`kubectl kustomize`),
#      and the rendered output validated against Kubernetes' schemas, strict;
#   2. deploy/container/check-without-engine.sh, on a database seeded from deploy/demo/;
#   3. the image built from deploy/container/Dockerfile with buildah, then run: `invmon demo`
#      in it, and its own ENTRYPOINT and CMD against the seeded database, with its
#      HEALTHCHECK, /readyz and the planted counts on /metrics, and that it has the s3 extra
#      (boto3), which the image installs for S3 sources. No registry but the package
#      registries is reachable here, so BASE is Debian bookworm's python3 made by debootstrap
#      (cached under /var/cache/invmon-ci). When buildah and debootstrap are missing and
#      cannot be installed (no apt-get, not root, apt fails), 3 is skipped and says why; once
#      they are there, any failure fails.
# 2 and 3 build with this checkout's version (`python -m setuptools_scm`) as INVMON_VERSION,
# and their /metrics must say it in invmon_build_info.
# The last line says whether the image build ran: "image build: ran: …" or "… skipped: …".
# Usage: INVMON_TEST_DSN=postgresql://postgres@127.0.0.1:5432/postgres deploy/check-kit.sh
# INVMON_TEST_DSN is a server where scratch databases may be created and dropped (the suite's
# own variable); without it, 2 and the runs of 3 are skipped, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
python=${PYTHON:-python3} # CI: the venv's, which has the dev dependencies
server=${INVMON_TEST_DSN:-}
cache=${INVMON_CI_CACHE:-/var/cache/invmon-ci}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
run_id="$$-$(date +%s)" # in every name this run makes: parallel runs leave each other alone
work=$(mktemp -d "/tmp/invmon-kit.XXXXXX")
containers=()
images=()
databases=()
daemon=""

say() { echo "check-kit: $*" >&2; }
building="" # set once the image build has started: its failure is the build's
fail() {
    say "FAILED: $*"
    [ -z "$building" ] || echo "image build: ran and FAILED: $*" >&2
    exit 1
}
elapsed() { echo "$((SECONDS - $1)) s"; }

stop_daemon() {
    # setsid made the daemon's buildah its own process group: TERM to all of it (invmon's
    # clean stop), KILL whatever is left after 20 s.
    [ -n "$daemon" ] || return 0
    kill -TERM -- "-$daemon" 2>/dev/null || true
    local until=$((SECONDS + 20))
    while kill -0 -- "-$daemon" 2>/dev/null && [ "$SECONDS" -lt "$until" ]; do sleep 0.2; done
    kill -KILL -- "-$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
    daemon=""
}

cleanup() {
    local status=$?
    stop_daemon
    for ctr in "${containers[@]}"; do buildah rm "$ctr" >/dev/null 2>&1 || true; done
    for image in "${images[@]}"; do buildah rmi "$image" >/dev/null 2>&1 || true; done
    for name in "${databases[@]}"; do
        "$python" deploy/tools/check_kit.py drop "$server" "$name" || true
    done
    # An interrupted debootstrap leaves /proc and /sys mounted in its target: unmount them
    # (deepest first) before removing anything, and never cross into another filesystem.
    grep -o " $work/[^ ]*" /proc/mounts | sort -r | xargs -r umount 2>/dev/null || true
    rm -rf --one-file-system "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT # bash runs no EXIT trap when a signal kills it: exit instead
trap 'exit 143' TERM

# Fails unless nothing listens on the daemon's port (9187, the image's config) by a deadline:
# the previous daemon may still be letting it go.
port_free() {
    local until=$((SECONDS + 20))
    while (exec 3<>/dev/tcp/127.0.0.1/9187) 2>/dev/null; do
        [ "$SECONDS" -lt "$until" ] || fail "something else listens on port 9187; stop it first"
        sleep 0.2
    done
}

# A database seeded from deploy/demo/ for each daemon, just before it starts: the seed's times
# are relative to its now (job 4003's lease is 30 s into a 2-minute grace), so a seed
# some minutes old has one more expired lease than planted.yaml says.
seed_fresh() {
    local name="invmon_kit_${run_id//-/_}_${#databases[@]}"
    databases+=("$name")
    seeded=$("$python" deploy/tools/check_kit.py seed "$server" "$name") ||
        fail "could not create and seed a scratch database on INVMON_TEST_DSN"
}

# The version both builds below are given, as the Dockerfile takes it (INVMON_VERSION): their
# sources are copied without .git, so setuptools-scm is asked here, in the checkout. Outside a
# checkout there is none to pass, and they get pyproject's fallback_version (so do the probes).
version=""
if git -C "$repo" rev-parse --git-dir >/dev/null 2>&1; then
    version=$("$python" -m setuptools_scm 2>"$work/version.err") ||
        fail "$python -m setuptools_scm (a dev dependency): $(tail -n 1 "$work/version.err")"
fi
say "building as version ${version:-(none: not a git checkout, so the fallback)}"

# 1. Render and validate every kustomization.
step=$SECONDS
command -v kubectl >/dev/null || fail "kubectl is needed: it renders with kustomize itself"
rendered=()
while IFS= read -r root; do
    mkdir -p "$work/rendered/$(dirname "$root")"
    kubectl kustomize "$root" >"$work/rendered/$root.yaml" 2>"$work/render.err" ||
        fail "kubectl kustomize $root: $(cat "$work/render.err")"
    rendered+=("$root.yaml")
done < <(find deploy -name kustomization.yaml -printf '%h\n' | sort)
[ "${#rendered[@]}" -gt 0 ] || fail "no kustomization.yaml under deploy/"
# Relative paths, so that each line names the kustomization it rendered.
(cd "$work/rendered" && "$python" "$repo/deploy/tools/check_kit.py" validate "${rendered[@]}") >&2 ||
    fail "the rendered manifests are invalid"
say "rendered and validated ${#rendered[@]} kustomizations in $(elapsed "$step")"

# 2. The image's contents, without an engine, on the demo's planted database.
if [ -n "$server" ]; then
    step=$SECONDS
    port_free
    seed_fresh
    EXPECT_PLANTED=deploy/demo/planted.yaml INVMON_DSN=$seeded INVMON_VERSION=$version \
        deploy/container/check-without-engine.sh >"$work/without-engine.log" 2>&1 || {
        tail -n 30 "$work/without-engine.log" >&2
        fail "deploy/container/check-without-engine.sh"
    }
    say "check-without-engine.sh passed in $(elapsed "$step"):" \
        "$(grep '^invmon_offending_rows' "$work/without-engine.log");" \
        "$(grep '^invmon_build_info' "$work/without-engine.log")"
else
    say "check-without-engine.sh not run: INVMON_TEST_DSN is not set (no server to seed)"
fi

# 3. The image itself: the tools, or a reason to skip.
tools_missing() { ! command -v buildah >/dev/null || ! command -v debootstrap >/dev/null; }
skip=""
if [ "$(id -u)" -ne 0 ]; then
    skip="not root (buildah's chroot isolation and debootstrap need root)"
elif tools_missing; then
    if ! command -v apt-get >/dev/null; then
        skip="buildah or debootstrap is missing and there is no apt-get to install them"
    elif ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        buildah debootstrap; } >"$work/apt.log" 2>&1; then
        skip="apt-get could not install buildah and debootstrap: $(tail -n 1 "$work/apt.log")"
    elif tools_missing; then
        skip="apt-get installed buildah and debootstrap, yet one is not on PATH"
    fi
fi
if [ -n "$skip" ]; then
    echo "image build: skipped: $skip" >&2
    exit 0
fi
building=1

# The base: what python:3.11-slim-bookworm gives the Dockerfile (python, pip, groupadd,
# useradd), from Debian's own packages. Cached by what it is made of; a week old, it is made
# again, as it would miss security updates.
step=$SECONDS
packages=python3,python3-pip,python3-venv,python-is-python3,ca-certificates
key=$(printf '%s\n' bookworm minbase "$packages" "$mirror" 1 | sha256sum | cut -c1-16)
tarball="$cache/bookworm-python-$key.tar"
mkdir -p "$cache" && chmod 0700 "$cache" # root only: a base others could swap is a risk
find "$cache" -maxdepth 1 -name 'bookworm-python-*.tar' -mtime +7 -delete
if [ -s "$tarball" ]; then
    made="cached"
else
    debootstrap --variant=minbase --include="$packages" bookworm "$work/rootfs" "$mirror" \
        >"$work/debootstrap.log" 2>&1 || {
        tail -n 20 "$work/debootstrap.log" >&2
        fail "debootstrap could not make the base from $mirror"
    }
    # As in python:3.11-slim: no package lists or .debs, and no PEP 668 marker, since the
    # image is the environment its pip installs into.
    rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"* \
        "$work/rootfs/usr/lib/"python3*/EXTERNALLY-MANAGED
    # Written beside and renamed: a run that stops halfway never leaves half a cache.
    tar -C "$work/rootfs" -cf "$tarball.$run_id" . && mv "$tarball.$run_id" "$tarball"
    rm -rf --one-file-system "$work/rootfs"
    made="made by debootstrap"
fi
# The build's pip reaches the package index as the host's does: the host's effective pip
# settings become the build's /etc/pip.conf, and the files they name (CA bundle, constraints,
# local indexes) are mounted read-only while RUN runs. buildah leaves an empty file or folder
# behind in the layer for each mount point it had to create, so the base has them all
# already: the Dockerfile's own layers then carry nothing of the host's.
"$python" deploy/tools/check_kit.py pip-config "$work/pip.conf" >"$work/pip-paths"
mounts=(--volume "$work/pip.conf:/etc/pip.conf:ro")
while IFS= read -r path; do mounts+=(--volume "$path:$path:ro"); done <"$work/pip-paths"
base="localhost/invmon-ci-base:$run_id"
ctr=$(buildah from scratch)
containers+=("$ctr")
root=$(buildah mount "$ctr")
tar -C "$root" -xf "$tarball" || {
    rm -f "$tarball" # unreadable: made again next time
    fail "could not unpack the cached base $tarball"
}
while IFS= read -r path; do
    if [ -d "$path" ]; then
        mkdir -p "$root$path"
    elif [ ! -e "$root$path" ]; then
        mkdir -p "$(dirname "$root$path")" && : >"$root$path"
    fi
done < <(echo /etc/pip.conf && cat "$work/pip-paths")
buildah umount "$ctr" >/dev/null
buildah config --env PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd python3 "$ctr"
buildah commit --quiet --rm "$ctr" "$base" >/dev/null
images+=("$base")
say "base image ($made) in $(elapsed "$step")"

# The build: the Dockerfile as users build it, but for BASE and the mounts above. Docker
# format, since OCI images have no HEALTHCHECK.
step=$SECONDS
image="localhost/invmon-ci:$run_id"
images+=("$image")
buildah bud --isolation=chroot --network=host --format docker --layers=false --force-rm \
    --build-arg BASE="$base" --build-arg INVMON_VERSION="$version" "${mounts[@]}" \
    -f deploy/container/Dockerfile -t "$image" . >"$work/build.log" 2>&1 || {
    tail -n 30 "$work/build.log" >&2
    fail "buildah bud deploy/container/Dockerfile"
}
say "built $image in $(elapsed "$step")"

# Your invariants on it (Dockerfile.invariants), as a repository made by `invmon init` builds
# them: the overlay's folder stands for one. The folder must hold theirs only, all valid.
step=$SECONDS
ours="localhost/invmon-ci-invariants:$run_id"
images+=("$ours")
context=deploy/kubernetes/overlays/invariants-configmap
buildah bud --isolation=chroot --format docker --layers=false --force-rm \
    --build-arg INVMON_IMAGE="$image" -f deploy/container/Dockerfile.invariants -t "$ours" \
    "$context" >"$work/build-invariants.log" 2>&1 || {
    tail -n 30 "$work/build-invariants.log" >&2
    fail "buildah bud deploy/container/Dockerfile.invariants"
}
ctr=$(buildah from --pull=false "$ours")
containers+=("$ctr")
wanted=$(cd "$context/invariants" && find . -type f | sort)
found=$(buildah run --isolation=chroot --user 10001:10001 "$ctr" -- \
    sh -c 'cd /etc/invmon/invariants && find . -type f | sort') ||
    fail "could not list /etc/invmon/invariants in the image of Dockerfile.invariants"
[ "$found" = "$wanted" ] ||
    fail "Dockerfile.invariants: the image holds $(echo $found), not $(echo $wanted)"
buildah run --isolation=chroot --user 10001:10001 "$ctr" -- \
    invmon lint /etc/invmon/invariants >"$work/lint.log" 2>&1 || {
    cat "$work/lint.log" >&2
    fail "invmon lint of the invariants in the image of Dockerfile.invariants"
}
say "built your-invariants image in $(elapsed "$step"): $(echo $found), and lint passed"

if [ -z "$server" ]; then
    echo "image build: ran: built on Debian bookworm's python3; not run: INVMON_TEST_DSN" \
        "is not set" >&2
    exit 0
fi

# The run: chroot isolation with the host's network (podman cannot start containers here).
step=$SECONDS
buildah inspect --type image "$image" >"$work/image.json"
for what in run healthcheck user; do
    "$python" deploy/tools/check_kit.py image-command "$what" <"$work/image.json" >"$work/$what" ||
        fail "the image's $what command"
done
mapfile -d '' -t command <"$work/run"
mapfile -d '' -t healthcheck <"$work/healthcheck"
mapfile -d '' -t user <"$work/user"
ctr=$(buildah from --pull=false --name "invmon-ci-$run_id" "$image")
containers+=("$ctr")

buildah run --isolation=chroot "$ctr" -- test ! -s /etc/pip.conf ||
    fail "the host's pip settings are in the image: the build's mounts leaked"
# The image installs the s3 extra, so that an invariant with an S3 source runs in it.
buildah run --isolation=chroot --user "${user[0]}" "$ctr" -- python -c 'import boto3, botocore' ||
    fail "the image has no boto3: the Dockerfile must install invariant-monitor[s3]"
timeout 180 buildah run --isolation=chroot --network=host --user "${user[0]}" "$ctr" -- \
    invmon demo --dsn "$server" >"$work/demo.log" 2>&1 || {
    tail -n 30 "$work/demo.log" >&2
    fail "invmon demo in the image"
}

port_free
seed_fresh
setsid buildah run --isolation=chroot --network=host --user "${user[0]}" \
    --env INVMON_DSN="$seeded" "$ctr" -- "${command[@]}" >"$work/daemon.log" 2>&1 &
daemon=$!
"$python" deploy/tools/check_kit.py probe http://127.0.0.1:9187 --deadline 60 --pid "$daemon" \
    --planted deploy/demo/planted.yaml --version "$version" >"$work/probe.log" || {
    tail -n 20 "$work/daemon.log" >&2
    fail "the image's daemon (${command[*]})"
}
timeout 30 buildah run --isolation=chroot --network=host --user "${user[0]}" "$ctr" -- \
    "${healthcheck[@]}" || fail "the image's HEALTHCHECK (${healthcheck[*]})"
stop_daemon
counts=$(sed -n 's/^invmon_offending_rows: //p' "$work/probe.log")
built=$(sed -n 's/^invmon_build_info: //p' "$work/probe.log")
say "ran the image in $(elapsed "$step"): invmon demo; ${command[*]} as ${user[0]}:" \
    "$(head -n 1 "$work/probe.log"), HEALTHCHECK passed; $counts; $built"
echo "image build: ran: built on Debian bookworm's python3 ($made), ran demo and daemon," \
    "HEALTHCHECK and planted counts passed, $((SECONDS)) s in all" >&2
