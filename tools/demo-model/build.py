"""Rebuild the demo model from scratch: generate -> tokenizer -> train -> export -> golden.

    python3 tools/demo-model/build.py OUTDIR [--steps N]     (then copy OUTDIR/* to models/demo-glm5/)
The generated corpus goes to $DEMO_DATA_DIR (default OUTDIR/data).
"""
import os, subprocess, sys

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
subprocess.check_call([sys.executable, os.path.join(HERE, "train.py"), "--out", out] + extra)
