#!/usr/bin/env bash
# Tests of scripts/fetch-test-data.sh, offline: a copy of the script in a repository laid out in
# a temporary folder, a local git repository standing in for the ONNX one (file://, with a later
# commit than the pinned one), and a local tarball standing in for an npm package.
#
#   tests/data/fetch_test.sh SOURCE_DIR SCENARIO
#   tests/data/fetch_test.sh --list          the scenarios (ctest registers one test each)
set -euo pipefail

source_dir=$1
scenario=${2:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
repo=$tmp/a/b/repo
data=$repo/build/test-data
out=$tmp/out
err=$tmp/err

fail() { echo "FAILED: $*" >&2; echo "--- stdout:" >&2; cat "$out" >&2 || true; echo "--- stderr:" >&2; cat "$err" >&2 || true; exit 1; }
expect_in() { grep -qF -- "$2" "$1" || fail "no '$2' in $1"; }
fetch() { ( cd "$tmp" && "$repo/scripts/fetch-test-data.sh" "$@" ) >"$out" 2>"$err"; }

# A corpus at DIR: two node cases, one light model, and a case the pin leaves out.
make_corpus() {
  mkdir -p "$1/node/test_a/test_data_set_0" "$1/node/test_b" "$1/node/test_unlisted" "$1/light" \
    "$1/pytorch-converted" "$1/pytorch-operator" "$1/simple"
  echo a >"$1/node/test_a/model.onnx"
  echo a-input >"$1/node/test_a/test_data_set_0/input_0.pb"
  echo b >"$1/node/test_b/model.onnx"
  echo unlisted >"$1/node/test_unlisted/model.onnx"
  echo light >"$1/light/light_m.onnx"
  echo light-output >"$1/light/light_m_output_0.pb"
}

# The ONNX repository's stand-in: the corpus under onnx/backend/test/data at the commit the pin
# names, then a commit that changes a case (fetching the wrong one would show).
make_remote() {
  local work=$tmp/onnx-work
  make_corpus "$work/onnx/backend/test/data"
  echo unrelated >"$work/README.md"
  git -C "$work" init -q
  git -C "$work" add -A
  git -C "$work" -c user.name=t -c user.email=t@t commit -qm pinned
  pinned=$(git -C "$work" rev-parse HEAD)
  echo changed >"$work/onnx/backend/test/data/node/test_a/model.onnx"
  git -C "$work" -c user.name=t -c user.email=t@t commit -qam later
  git clone -q --bare "$work" "$tmp/onnx.git"
  git -C "$tmp/onnx.git" config uploadpack.allowFilter true
  git -C "$tmp/onnx.git" config uploadpack.allowAnySHA1InWant true
  rm -rf "$work"
}

# The repository: the script, and pins made by the script itself from a corpus, without the
# unlisted case, naming URL and COMMIT as the source.
make_repo() {
  local url=$1 commit=$2
  mkdir -p "$repo/scripts" "$repo/tests/data" "$tmp/pinned"
  cp "$source_dir/scripts/fetch-test-data.sh" "$repo/scripts/"
  printf '# a test pin\nsource %s %s onnx/backend/test/data\n' "$url" "$commit" >"$repo/tests/data/conformance.pin"
  make_corpus "$tmp/pinned"
  rm -r "$tmp/pinned/node/test_unlisted"
  "$repo/scripts/fetch-test-data.sh" --pin-conformance "$tmp/pinned" 2>/dev/null
  grep -qx 'node/test_a' "$repo/tests/data/conformance.pin" || fail "--pin-conformance listed no node/test_a"
  grep -qx 'light/light_m.onnx' "$repo/tests/data/conformance.pin" || fail "--pin-conformance listed no light/light_m.onnx"
  grep -q '^digest [0-9a-f]\{64\}$' "$repo/tests/data/conformance.pin" || fail "--pin-conformance wrote no digest"
  make_package
}

# An npm package as a local tarball, pinned with its model's sha256.
make_package() {
  mkdir -p "$tmp/pkg/package/models"
  echo '{"name": "fake-models", "version": "1.0.0"}' >"$tmp/pkg/package/package.json"
  echo 'model bytes' >"$tmp/pkg/package/models/m.onnx"
  tar czf "$tmp/fake-models-1.0.0.tgz" -C "$tmp/pkg" package
  printf '# a test pin\nm file:%s package/models/m.onnx %s\n' "$tmp/fake-models-1.0.0.tgz" \
    "$(sha256sum "$tmp/pkg/package/models/m.onnx" | cut -d' ' -f1)" >"$repo/tests/data/models.pin"
}

expect_linked() {
  fetch conformance || fail "exit $?"
  [[ -L $data/conformance && $(realpath "$data/conformance") == "$(realpath "$1")" ]] || fail "$data/conformance is no link to $1"
  expect_in "$data/conformance.stamp" "linked $(realpath "$1")"
  fetch conformance || fail "exit $? the second time"
  expect_in "$err" "conformance: up to date"
}

expect_fetched_from_git() {
  [[ -d $data/conformance && ! -L $data/conformance ]] || fail "no fetched corpus"
  [[ $(cat "$data/conformance/node/test_a/model.onnx") == a ]] || fail "test_a is not the pinned commit's"
  [[ -f $data/conformance/light/light_m_output_0.pb && -f $data/conformance/node/test_b/model.onnx ]] || fail "cases missing"
  [[ ! -e $data/conformance/node/test_unlisted && ! -e $data/conformance/README.md ]] || fail "more than the listed cases"
  expect_in "$data/conformance.stamp" "git file://$tmp/onnx.git $pinned"
}

scenario_LinksTheSharedCorpusBesideTheRepository() {
  make_repo file:///nowhere 0000000000000000000000000000000000000000
  make_corpus "$tmp/a/b/shared/conformance"
  expect_linked "$tmp/a/b/shared/conformance"
}

scenario_LinksTheSharedCorpusBesideItsParent() {
  make_repo file:///nowhere 0000000000000000000000000000000000000000
  make_corpus "$tmp/a/shared/conformance"
  expect_linked "$tmp/a/shared/conformance"
}

scenario_LinksTheSharedCorpusTheVariableNames() {
  make_repo file:///nowhere 0000000000000000000000000000000000000000
  make_corpus "$tmp/elsewhere/conformance"
  ONNX_REWRITE_SHARED_DIR=$tmp/elsewhere expect_linked "$tmp/elsewhere/conformance"
}

scenario_FetchesThePinnedCommitFromGitAgainWhenThePinChanges() {
  make_remote
  make_repo "file://$tmp/onnx.git" "$pinned"
  fetch conformance || fail "exit $?"
  expect_fetched_from_git
  echo kept >"$data/conformance/node/test_b/marker"
  fetch conformance || fail "exit $?"
  expect_in "$err" "conformance: up to date"
  sed -i '1s/.*/# a changed pin/' "$repo/tests/data/conformance.pin"
  fetch conformance || fail "exit $?"
  [[ ! -e $data/conformance/node/test_b/marker ]] || fail "not fetched again after the pin changed"
  expect_fetched_from_git
}

scenario_PassesOverASharedCorpusThatIsNotThePinnedOne() {
  make_remote
  make_repo "file://$tmp/onnx.git" "$pinned"
  make_corpus "$tmp/a/b/shared/conformance"
  echo other >"$tmp/a/b/shared/conformance/node/test_b/model.onnx"
  make_corpus "$tmp/a/shared/conformance"
  rm -r "$tmp/a/shared/conformance/light"
  fetch conformance || fail "exit $?"
  expect_fetched_from_git
  expect_in "$err" "its files differ from the pinned ones"
  expect_in "$err" "lacks 1 listed case(s), light/light_m.onnx first"
}

scenario_FailsNamingWhatItTriedWithNeitherSource() {
  make_repo "file://$tmp/no-such-repository.git" 0000000000000000000000000000000000000000
  if fetch; then fail "exit 0 without a source"; fi
  expect_in "$err" "test data set 'conformance' is missing and could not be fetched"
  expect_in "$err" "$tmp/a/b/shared/conformance: absent"
  expect_in "$err" "$tmp/a/shared/conformance: absent"
  expect_in "$err" "git file://$tmp/no-such-repository.git at 0000000000000000000000000000000000000000:"
  expect_in "$err" "ONNX_REWRITE_SKIP_DATA=conformance"
  [[ ! -e $data/conformance && ! -e $data/conformance.stamp ]] || fail "a corpus was installed"
  [[ -f $data/models/m/model.onnx ]] || fail "the other set was not fetched"
  [[ -z $(find "$data" -mindepth 1 -name '.*') ]] || fail "work folders left behind: $(ls -a "$data")"
}

scenario_FailsWhenTheFetchedCorpusIsNotThePinnedOne() {
  make_remote
  make_repo "file://$tmp/onnx.git" "$(git -C "$tmp/onnx.git" rev-parse HEAD)"
  if fetch conformance; then fail "exit 0 with the wrong commit's corpus"; fi
  expect_in "$err" "is not the pinned corpus: its files differ from the pinned ones"
  [[ ! -e $data/conformance ]] || fail "a corpus was installed"
}

scenario_FetchesTheModelsAndChecksTheirSha256() {
  make_repo file:///nowhere 0000000000000000000000000000000000000000
  fetch models || fail "exit $?"
  [[ $(cat "$data/models/m/model.onnx") == 'model bytes' ]] || fail "no models/m/model.onnx"
  expect_in "$data/models.stamp" "npm file:$tmp/fake-models-1.0.0.tgz"
  printf 'n file:%s package/models/m.onnx %064d\n' "$tmp/fake-models-1.0.0.tgz" 0 >>"$repo/tests/data/models.pin"
  if fetch models; then fail "exit 0 with a wrong sha256"; fi
  expect_in "$err" "n (package/models/m.onnx of file:$tmp/fake-models-1.0.0.tgz) has sha256"
  [[ -f $data/models/m/model.onnx ]] || fail "the models fetched before were removed"
}

scenario_LeavesOutTheSetsTheVariableNames() {
  make_repo file:///nowhere 0000000000000000000000000000000000000000
  ONNX_REWRITE_SKIP_DATA=conformance fetch || fail "exit $?"
  expect_in "$err" "conformance: skipped (ONNX_REWRITE_SKIP_DATA)"
  [[ -f $data/models/m/model.onnx && ! -e $data/conformance ]] || fail "not just the models fetched"
  if ONNX_REWRITE_SKIP_DATA=conformance,modles fetch; then fail "exit 0 with an unknown set"; fi
  expect_in "$err" "unknown data set 'modles'"
}

if [[ $source_dir == --list ]]; then
  declare -F | sed -n 's/^declare -f scenario_//p'
  exit 0
fi
declare -F "scenario_$scenario" >/dev/null || { echo "unknown scenario '$scenario'" >&2; exit 2; }
"scenario_$scenario"
