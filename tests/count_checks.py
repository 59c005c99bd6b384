"""
How much the suite checks, to compare two versions of it (not collected by pytest): pytest's own count of
test items (a merged scenario that a parametrized test reads back is an item of its own), and the checks
written in each test file (assert statements, and calls of pytest.approx, torch.testing.assert_close and
pytest.raises).

    python tests/count_checks.py            # this checkout
    python tests/count_checks.py OTHER_REPO # another checkout (a git worktree of an earlier commit)
"""

import ast
import os
import re
import subprocess
import sys
from collections import Counter

CHECK_CALLS = {"approx", "assert_close", "raises"}


def written_checks(path: str) -> int:
    """Assert statements and check calls in a file."""
    tree = ast.parse(open(path).read())
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            count += 1
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            count += name in CHECK_CALLS
    return count


def collected_items(repo: str) -> Counter:
    """pytest's test items per file (collection only: nothing runs)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
                          cwd=repo, capture_output=True, text=True)
    items = [line.split("::")[0] for line in proc.stdout.splitlines() if "::" in line]
    if not items:
        raise SystemExit(f"pytest collected nothing in {repo}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return Counter(os.path.basename(item) for item in items)


def main() -> None:
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(__file__)))
    tests = os.path.join(repo, "tests")
    items = collected_items(repo)
    files = sorted(f for f in os.listdir(tests) if re.fullmatch(r"(test_.*|conftest|ranks)\.py", f))
    print(f"{'file':32} {'items':>6} {'checks':>7}")
    total_checks = 0
    for name in files:
        checks = written_checks(os.path.join(tests, name))
        total_checks += checks
        print(f"{name:32} {items.get(name, 0):6d} {checks:7d}")
    print(f"{'total':32} {sum(items.values()):6d} {total_checks:7d}")


if __name__ == "__main__":
    main()
