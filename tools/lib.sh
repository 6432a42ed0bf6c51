# Sourced by tools/*/build.sh: what every build into mariposa's cache does
# alike. A build script sets its own check of a finished build, then:
#
#   dir=$(cache_dir "consul-$version")     # the cache entry, per OS and arch
#   build_once "$dir" "Consul v$version" pinned "$bin"
#   ... build, writing temporary files renamed into place ...
#
# build_once prints the result and exits when the check passes. Otherwise
# it takes the entry's lock (flock on a file next to the result), waiting
# for a build already running, and checks again: a second caller uses the
# first one's result instead of building (and replacing a binary in use)
# again. It returns, holding the lock, when this caller must build.
#   MARIPOSA_CACHE  cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/mariposa)

# cache_dir NAME prints the cache entry for NAME on this OS and arch.
cache_dir() {
  local cache=${MARIPOSA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mariposa}
  echo "$cache/$1-$(go env GOOS)-$(go env GOARCH)"
}

# build_once DIR WHAT CHECK RESULT: see above. CHECK is a command (a
# function of the script) that succeeds when the build in DIR is finished
# and right.
build_once() {
  local dir=$1 what=$2 check=$3 result=$4
  if "$check"; then
    echo "$result"; exit 0
  fi
  mkdir -p "$dir"
  if command -v flock >/dev/null; then
    # fd 9 stays open, and the lock held, until the script exits.
    exec 9>"$dir/.build.lock"
    if ! flock -n 9; then
      echo "build.sh: another build of $what is running; waiting for it" >&2
      flock 9
    fi
    if "$check"; then
      echo "$result"; exit 0
    fi
  else
    echo "build.sh: no flock on this system; concurrent builds are not serialized" >&2
  fi
}
