#!/usr/bin/env bash
# Builds the pinned Consul agent once and caches it outside the clone, keyed by
# version, OS and arch. Prints the binary's path on stdout.
#   MARIPOSA_CACHE  cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/mariposa)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
version=$(awk '$1=="github.com/hashicorp/consul"{print $2; exit}' "$here/go.mod")
version=${version#v}
[ -n "$version" ] || { echo "build.sh: no consul version in $here/go.mod" >&2; exit 1; }
cache=${MARIPOSA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mariposa}
dir="$cache/consul-$version-$(go env GOOS)-$(go env GOARCH)"
bin="$dir/consul"
if [ -x "$bin" ] && "$bin" version 2>/dev/null | grep -q "^Consul v$version"; then
  echo "$bin"; exit 0
fi
mkdir -p "$dir"
echo "build.sh: building Consul v$version into $dir (about 6 minutes on 2 cores)" >&2
cd "$here"
go build -trimpath -o "$bin.tmp.$$" github.com/hashicorp/consul
mv -f "$bin.tmp.$$" "$bin"
"$bin" version >&2
echo "$bin"
