#!/usr/bin/env bash
# Builds the pinned Consul agent once and caches it outside the clone, keyed by
# version, OS and arch. Prints the binary's path on stdout.
#   MARIPOSA_CACHE  cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/mariposa)
# Concurrent callers are safe: one builds, the others wait for it (flock on a
# lock file next to the binary, tools/lib.sh) and use its result. A build
# writes a temporary file and renames it, so a binary in use is never
# overwritten.
#   MARIPOSA_CONSUL_BUILD_CMD  for tests only: a program run instead of
#     `go build`, with the path to write the binary to as its argument.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
version=$(awk '$1=="github.com/hashicorp/consul"{print $2; exit}' "$here/go.mod")
version=${version#v}
[ -n "$version" ] || { echo "build.sh: no consul version in $here/go.mod" >&2; exit 1; }
. "$here/../lib.sh"
dir=$(cache_dir "consul-$version")
bin="$dir/consul"

# pinned says whether $bin is there and reports the pinned version. The
# output is captured before it is matched: `consul version | grep -q` fails
# under pipefail whenever grep exits at its match before consul has written
# the rest and consul dies of SIGPIPE, and that rebuilt Consul at random.
pinned() {
  local out first
  [ -x "$bin" ] || return 1
  out=$("$bin" version 2>/dev/null) || return 1
  first=${out%%$'\n'*}
  # "Consul v1.20.6", possibly with a suffix ("-dev"), never "v1.20.60".
  [[ $first == "Consul v$version" || $first == "Consul v$version"[!0-9]* ]]
}

build_once "$dir" "Consul v$version" pinned "$bin"
echo "build.sh: building Consul v$version into $dir (about 6 minutes on 2 cores)" >&2
tmp="$bin.tmp.$$"
trap 'rm -f "$tmp"' EXIT
if [ -n "${MARIPOSA_CONSUL_BUILD_CMD:-}" ]; then
  "$MARIPOSA_CONSUL_BUILD_CMD" "$tmp"
else
  (cd "$here" && go build -trimpath -o "$tmp" github.com/hashicorp/consul)
fi
mv -f "$tmp" "$bin"
if ! pinned; then
  echo "build.sh: the binary built at $bin does not report Consul v$version:" >&2
  "$bin" version >&2 || true
  exit 1
fi
"$bin" version >&2
echo "$bin"
