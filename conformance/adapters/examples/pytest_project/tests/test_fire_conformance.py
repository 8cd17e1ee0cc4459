from fire_conformance.pytest_plugin import fire_cases

# Every golden-vector case is one test item: `pytest -k depth`, `pytest -m edge`, `--junitxml`.
test_my_fire = fire_cases(impl="../my_fire.py:FIRE", dtype="f32")
