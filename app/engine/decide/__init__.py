"""PURE decisions of the workflow engine: (snapshot, event) -> effect. No database, no clock, no I/O;
``app/engine/driver.py`` and the command / job modules load the snapshot under the instance lock,
ask these functions and apply the effect through ``app/engine/transitions``. Unit and property
tests (``tests/unit/test_engine_decide*.py``) run them without PostgreSQL."""
