#!/usr/bin/env bash
# release.sh — build sentry's release: static binaries for each platform,
# stamped with the version and commit, their SHA-256 checksums, and the
# container image when docker works.
#
#   scripts/release.sh [-o DIR] [-t OS/ARCH[,OS/ARCH...]] [-allow-dirty] VERSION
#
#   VERSION       the release's version, e.g. v1.2.0 (what `sentry version`
#                 and sentry_build_info's version label say)
#   -o DIR        where the files go (default dist/VERSION)
#   -t LIST       platforms (default linux/amd64,linux/arm64)
#   -allow-dirty  build from a work tree with uncommitted changes; the
#                 commit is then stamped COMMIT-dirty
#
# For each platform DIR gets sentry-VERSION-OS-ARCH (the binary) and
# sentry-VERSION-OS-ARCH.tar.gz (the binary, LICENSE, README.md and
# deploy/), and DIR/SHA256SUMS lists the checksums of all of them
# (`sha256sum -c SHA256SUMS` in DIR verifies). The binary of the host's
# platform is run once to check that it says VERSION and the commit.
#
# The image (deploy/Dockerfile, tagged sentry:VERSION) is built only when
# `docker info` succeeds; otherwise the script says so, prints the command,
# and still exits 0: the binaries are the release, the image is optional.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit "${1:-2}"; }

out="" targets="linux/amd64,linux/arm64" dirty=0
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out="$2"; shift 2 ;;
    -t) targets="$2"; shift 2 ;;
    -allow-dirty) dirty=1; shift ;;
    -h|-help|--help) usage 0 ;;
    -*) echo "release.sh: unknown flag $1" >&2; usage ;;
    *) break ;;
  esac
done
[ $# -eq 1 ] || usage
version="$1"
case "$version" in
  *[!A-Za-z0-9._+-]*|"") echo "release.sh: version $version: use letters, digits and ._+- only" >&2; exit 2 ;;
esac

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
commit="$(git rev-parse HEAD)"
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  if [ "$dirty" = 0 ]; then
    echo "release.sh: the work tree has uncommitted changes; commit them or pass -allow-dirty" >&2
    exit 1
  fi
  commit="$commit-dirty"
fi
out="${out:-dist/$version}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

ldflags="-s -w -X main.buildVersion=$version -X main.buildCommit=$commit"
files=()
IFS=, read -r -a platforms <<<"$targets"
for p in "${platforms[@]}"; do
  os="${p%/*}" arch="${p#*/}"
  name="sentry-$version-$os-$arch"
  echo "release.sh: building $name"
  CGO_ENABLED=0 GOOS="$os" GOARCH="$arch" go build -trimpath -ldflags "$ldflags" -o "$out/$name" ./cmd/sentry
  stage="$(mktemp -d)"
  mkdir "$stage/$name"
  cp "$out/$name" "$stage/$name/sentry"
  cp LICENSE README.md "$stage/$name/"
  cp -R deploy "$stage/$name/deploy"
  find "$stage/$name/deploy" -name '*_test.go' -delete
  # Reproducible archives: fixed owner, order and times.
  tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner \
      --mtime="$(git log -1 --format=%cI)" -czf "$out/$name.tar.gz" "$name"
  rm -rf "$stage"
  files+=("$name" "$name.tar.gz")
  if [ "$os" = "$(go env GOHOSTOS)" ] && [ "$arch" = "$(go env GOHOSTARCH)" ]; then
    said="$("$out/$name" version)"
    if ! grep -qx "sentry $version" <<<"$said" || ! grep -q "^commit: *$commit\$" <<<"$said"; then
      echo "release.sh: $name says:" >&2
      echo "$said" >&2
      echo "release.sh: want version $version and commit $commit" >&2
      exit 1
    fi
  fi
done
(cd "$out" && sha256sum "${files[@]}" > SHA256SUMS && sha256sum -c --quiet SHA256SUMS)
echo "release.sh: wrote ${#files[@]} files and SHA256SUMS to $out"

image_cmd=(docker build -f deploy/Dockerfile --build-arg "VERSION=$version" --build-arg "COMMIT=$commit" -t "sentry:$version" .)
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  echo "release.sh: building the image sentry:$version"
  "${image_cmd[@]}"
else
  echo "release.sh: docker is not available here: the image was NOT built. To build it:"
  echo "  ${image_cmd[*]}"
fi
