#!/usr/bin/env bash
# Ports the blind set's patches (internal/mutant/blind/*.patch) to the working tree as it is
# now, after a change to the code they patch: each patch that no longer applies is applied with
# a three-way merge (git apply --3way, from the blobs its index lines name, which the history
# keeps) in a scratch worktree of HEAD, and rewritten from the result. A patch whose merge
# conflicts is left as it is and named: port that one by hand (the defect it describes is in
# catalogue.yaml). Only the patches change; the tree is never touched.
#
# Usage: hack/port-blind-patches.sh        (from anywhere in the repository)
set -euo pipefail
top=$(git rev-parse --show-toplevel)
cd "$top"
dir=internal/mutant/blind
scratch=$(mktemp -d)
trap 'git worktree remove --force "$scratch/wt" >/dev/null 2>&1 || true; rm -rf "$scratch"' EXIT
git worktree add --detach "$scratch/wt" HEAD >/dev/null 2>&1
# The scratch tree holds the working tree's uncommitted changes too, so patches are ported to
# what is being committed, not to HEAD alone.
git diff HEAD --binary > "$scratch/wip.diff"
[ -s "$scratch/wip.diff" ] && git -C "$scratch/wt" apply --binary "$scratch/wip.diff"
git -C "$scratch/wt" add -A >/dev/null
git -C "$scratch/wt" -c user.name=port -c user.email=port@localhost commit -qm wip --allow-empty
ported=0 failed=()
for p in "$dir"/*.patch; do
	if git -C "$scratch/wt" apply --check "$top/$p" 2>/dev/null; then
		continue
	fi
	if git -C "$scratch/wt" apply --3way "$top/$p" >/dev/null 2>&1 && [ -z "$(git -C "$scratch/wt" diff --name-only --diff-filter=U)" ]; then
		git -C "$scratch/wt" diff --cached HEAD > "$top/$p.new"
		git -C "$scratch/wt" reset -q --hard HEAD
		mv "$top/$p.new" "$top/$p"
		echo "ported $p"
		ported=$((ported + 1))
	else
		git -C "$scratch/wt" reset -q --hard HEAD
		failed+=("$p")
	fi
done
echo "$ported patch(es) ported"
if [ ${#failed[@]} -gt 0 ]; then
	printf 'conflicts, port by hand: %s\n' "${failed[@]}" >&2
	exit 1
fi
