#!/usr/bin/env bash
# Builds the pinned Prometheus server and promtool once and caches them outside
# the clone, keyed by version, OS and arch, as tools/consul/build.sh does for
# Consul. Prints the directory holding `prometheus` and `promtool` on stdout.
#   MARIPOSA_CACHE  cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/mariposa)
# Only the service discovery the tests use is compiled in (the build tags
# remove_all_sd,enable_consul_sd; file and http discovery are always there):
# the full set would pull in every cloud SDK and the Kubernetes client. The
# first build took 15 minutes of wall time on 2 cores shared with other work
# (prometheus 9, promtool 6); a rebuild with Go's build cache warm, 44 s.
# Concurrent callers are safe: one builds, the others wait for it (flock,
# tools/lib.sh) and use its result; binaries are written to temporary names and renamed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
version=$(awk '$1=="github.com/prometheus/prometheus"{print $2; exit}' "$here/go.mod")
[ -n "$version" ] || { echo "build.sh: no prometheus version in $here/go.mod" >&2; exit 1; }
. "$here/../lib.sh"
dir=$(cache_dir "prometheus-$version")
tags=remove_all_sd,enable_consul_sd

# built says whether both binaries are there and report the pinned version.
# A stamp written after both are in place marks a finished build (a build
# killed half-way leaves none). The output is captured before it is matched
# (see tools/consul/build.sh: a grep that exits early kills the writer).
built() {
  local out
  [ -x "$dir/prometheus" ] && [ -x "$dir/promtool" ] && [ -f "$dir/.built" ] || return 1
  out=$("$dir/promtool" --version 2>&1) || return 1
  [[ $out == "promtool, version ${version#v} "* ]]
}

build_once "$dir" "Prometheus $version" built "$dir"
echo "build.sh: building Prometheus $version (with Consul SD) into $dir (about 15 minutes on 2 cores)" >&2
# The version the binaries report, as Prometheus's own build stamps it.
ldflags="-X github.com/prometheus/common/version.Version=${version#v} -X github.com/prometheus/common/version.Branch=module"
started=$(date +%s)
rm -f "$dir/.built"
trap 'rm -f "$dir"/*.tmp.$$' EXIT
for cmd in prometheus promtool; do
  (cd "$here" && go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$dir/$cmd.tmp.$$" "github.com/prometheus/prometheus/cmd/$cmd")
  mv -f "$dir/$cmd.tmp.$$" "$dir/$cmd"
done
touch "$dir/.built"
if ! built; then
  echo "build.sh: the promtool built in $dir does not report Prometheus $version:" >&2
  "$dir/promtool" --version >&2 || true
  exit 1
fi
out=$("$dir/prometheus" --version 2>&1)
echo "build.sh: ${out%%$'\n'*}; built in $(( $(date +%s) - started ))s" >&2
echo "$dir"
