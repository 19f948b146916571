# The two quick-start commands: `make demo` and `make test` (each sets everything up first).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test opencl lint paper

$(BIN)/accy: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[pocl,test,dev]'
	touch $@

# An OpenCL CPU driver. The PyPI PoCL (extra `pocl`) is built on LLVM 14, which cannot compile
# for CPUs newer than it knows (e.g. AMD Zen 5); Debian's pocl-opencl-icd (LLVM 15) can.
opencl:
	@if [ ! -e /etc/OpenCL/vendors/pocl.icd ] && command -v apt-get >/dev/null; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -qq pocl-opencl-icd >/dev/null; \
	fi

demo: $(BIN)/accy opencl
	$(BIN)/accy demo

# the suite on every core (pytest-xdist; a plain `pytest` runs it in one process)
test: $(BIN)/accy opencl
	$(BIN)/python -m pytest -n auto --dist worksteal

lint: $(BIN)/accy
	$(BIN)/ruff check accy rewrites experiments tests

# Regenerate papers/ (ablation and contraction studies at the `paper` suite size, ~6 min on
# two cores): results, figures and the generated blocks of papers/*.md.
paper: $(BIN)/accy opencl
	$(BIN)/pip install --quiet -e '.[viz]'
	$(BIN)/accy experiment paper
