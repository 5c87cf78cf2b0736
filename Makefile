# make run   : create .venv, install tidings, run the PLDB pipeline (3 brokers, monitors, tuple store, Spark health stream, plots; a broker and the tuple store killed and restarted mid-run), print a summary
# make test  : create .venv, install tidings with test extras (and Chromium for the dashboard test, mosquitto-clients
#              for the MQTT tests), run the whole suite
#              but the tests marked soak, on TEST_WORKERS pytest workers (pytest-xdist; default 2, one per core of
#              CI's 2), then the Spark jobs alone (each is a JVM and Python workers that want both cores):
#              about 16 minutes there with the install, whose limit is 20; docs/testing.md
# make soak  : the long sweeps and soaks (tests marked soak: the long forms and full seed counts), skipped by make test
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed
TEST_WORKERS ?= 2

.PHONY: run test soak lint bench clean browser mqtt-clients

$(STAMP): pyproject.toml setup.py src/tidings/spark/_columns.c src/tidings/core/publish/_batch.c src/tidings/core/_records.c src/tidings/core/mqtt/_publishes.c
	@echo "== creating $(VENV) and installing tidings with its dependencies (PySpark is large: a minute or more the first time)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --disable-pip-version-check --progress-bar on -e '.[spark,plot,sim,test]'
	touch $(STAMP)
	@echo "== installed; the tidings command is $(VENV)/bin/tidings (or run: . $(VENV)/bin/activate)"

run: $(STAMP)
	$(PY) -m tidings.cli.main demo --data ./data

# the dashboard's browser test drives Debian's Chromium through its chromedriver (apt-get only if missing)
browser:
	@test -x /usr/bin/chromium && test -x /usr/bin/chromedriver || { \
		echo "== installing Debian's chromium and chromium-driver for the dashboard's browser test"; \
		apt-get update -q && apt-get install -y -q chromium chromium-driver; }

# the MQTT tests drive Debian's mosquitto_pub and mosquitto_sub (apt-get only if missing)
mqtt-clients:
	@test -x /usr/bin/mosquitto_pub && test -x /usr/bin/mosquitto_sub || { \
		echo "== installing Debian's mosquitto-clients for the MQTT tests"; \
		apt-get update -q && apt-get install -y -q mosquitto-clients; }

test: $(STAMP) browser mqtt-clients
	$(PY) -m ruff check src tests bench
	$(PY) -m mypy
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "not spark" --durations=25
	$(PY) -m pytest -q -m spark --durations=10

# long sweeps and soaks (the tests marked soak, and the long forms of bounded tests): run before resolving an issue
soak: $(STAMP)
	TIDINGS_SOAK=1 $(PY) -m pytest -q -n $(TEST_WORKERS) -m "soak and not spark" --timeout=14400 --durations=0
	TIDINGS_SOAK=1 $(PY) -m pytest -q -m "soak and spark" --timeout=14400 --durations=0

lint: $(STAMP)
	$(PY) -m ruff check src tests bench
	$(PY) -m mypy

bench: $(STAMP)
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) data build *.egg-info src/tidings/spark/*.so src/tidings/core/publish/*.so src/tidings/core/*.so \
	  src/tidings/core/mqtt/*.so src/tidings/aio/*.so
