"""Reads pytest's --junitxml report and prints how many tests ran; exits 1 when fewer passed than
the floor (a suite that shrinks, e.g. a test file that stopped being collected, fails CI).

    python .ci/count_tests.py REPORT.xml --min-passed N

"Ran" is every test that was not skipped; the skips are split into those for the missing GPU
(tests/conftest.py's reason) and the rest."""
import argparse
import sys
import xml.etree.ElementTree as ET


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    ap.add_argument("--min-passed", type=int, required=True)
    a = ap.parse_args()
    tests = failed = errors = skipped = gpu = 0
    for case in ET.parse(a.report).getroot().iter("testcase"):
        tests += 1
        for child in case:
            if child.tag == "failure":
                failed += 1
            elif child.tag == "error":
                errors += 1
            elif child.tag == "skipped":
                skipped += 1
                gpu += "needs a CUDA GPU" in (child.get("message") or "")
    passed = tests - failed - errors - skipped
    print(f"tests: {tests - skipped} ran ({passed} passed, {failed} failed, {errors} errors), {skipped} "
          f"skipped ({gpu} for the missing GPU, {skipped - gpu} for other reasons); floor {a.min_passed} passed")
    if tests == 0 or passed < a.min_passed:
        print(f"FAIL: {passed} tests passed, fewer than the floor of {a.min_passed}: the suite ran less than it should")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
