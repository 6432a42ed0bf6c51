#!/usr/bin/env bash
# Builds the consul-template release that mariposa links (its version in the
# root go.mod) from its Go module, once, and caches it outside the clone,
# keyed by version, OS and arch. Prints the binary's path on stdout. The
# render tests cross-check mariposa's templates against it, and the render
# benchmarks measure it beside mariposa.
#   MARIPOSA_CACHE  cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/mariposa)
# Concurrent callers are safe: one builds, the others wait for it (flock on a
# lock file next to the binary, tools/lib.sh) and use its result. A build writes a temporary
# file and renames it, so a binary in use is never overwritten.
#   MARIPOSA_CONSUL_TEMPLATE_BUILD_CMD  for tests only: a program run instead
#     of `go install`, with the path to write the binary to as its argument.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
version=$(awk '$1=="github.com/hashicorp/consul-template"{print $2; exit}' "$root/go.mod")
version=${version#v}
[ -n "$version" ] || { echo "build.sh: no consul-template version in $root/go.mod" >&2; exit 1; }
. "$here/../lib.sh"
dir=$(cache_dir "consul-template-$version")
bin="$dir/consul-template"

# pinned says whether $bin is there and reports the pinned version
# ("consul-template v0.41.1 (abcdef0)"). The output is captured before it
# is matched, as tools/consul/build.sh does (a pipe into grep -q can kill
# the writer with SIGPIPE under pipefail).
pinned() {
  local out first
  [ -x "$bin" ] || return 1
  out=$("$bin" -v 2>&1) || return 1
  first=${out%%$'\n'*}
  [[ $first == "consul-template v$version" || $first == "consul-template v$version"[!0-9.]* ]]
}

build_once "$dir" "consul-template v$version" pinned "$bin"
echo "build.sh: building consul-template v$version into $dir (about 2 minutes on 2 cores)" >&2
tmp="$bin.tmp.$$"
gobin="$dir/.gobin.$$"
trap 'rm -rf "$tmp" "$gobin"' EXIT
if [ -n "${MARIPOSA_CONSUL_TEMPLATE_BUILD_CMD:-}" ]; then
  "$MARIPOSA_CONSUL_TEMPLATE_BUILD_CMD" "$tmp"
else
  # The released module with its own go.mod (outside this module, so
  # mariposa's requirements do not change what is built).
  mkdir -p "$gobin"
  (cd "$gobin" && GOFLAGS= GOBIN="$gobin" go install -trimpath "github.com/hashicorp/consul-template@v$version")
  mv -f "$gobin/consul-template" "$tmp"
fi
mv -f "$tmp" "$bin"
if ! pinned; then
  echo "build.sh: the binary built at $bin does not report consul-template v$version:" >&2
  "$bin" -v >&2 || true
  exit 1
fi
"$bin" -v >&2
echo "$bin"
