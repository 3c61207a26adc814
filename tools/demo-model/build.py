"""Rebuild the demo model from scratch: generate -> tokenizer -> train -> export -> golden, then
the MTP layer: train_mtp (main model frozen) -> export -> MTP golden.

    python3 tools/demo-model/build.py OUTDIR [--steps N]     (then copy OUTDIR/* to models/demo-glm5/)
The generated corpus goes to $DEMO_DATA_DIR (default OUTDIR/data); the main model without its MTP
layer to OUTDIR/main. Extra arguments go to train.py.
"""
import os, shutil, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
out = sys.argv[1]
extra = sys.argv[2:]
data = os.environ.get("DEMO_DATA_DIR", os.path.join(out, "data")) if "--data" not in extra else None
if data:
    os.makedirs(data, exist_ok=True)
    py = sys.executable
    subprocess.check_call([py, os.path.join(HERE, "generate_data.py"), "--seed", "0", "--n", "100000",
                           os.path.join(data, "train.jsonl")])
    subprocess.check_call([py, os.path.join(HERE, "generate_data.py"), "--seed", "1", "--n", "2000",
                           os.path.join(data, "heldout.jsonl")])
    extra = ["--data", data] + extra
else:
    data = extra[extra.index("--data") + 1]
main = os.path.join(out, "main")
subprocess.check_call([sys.executable, os.path.join(HERE, "train.py"), "--out", main] + extra)
subprocess.check_call([sys.executable, os.path.join(HERE, "train_mtp.py"), "--data", data, "--model", main,
                       "--out", out])
for f in os.listdir(main):
    if f not in ("model.safetensors", "config.json"):
        shutil.copy(os.path.join(main, f), os.path.join(out, f))
