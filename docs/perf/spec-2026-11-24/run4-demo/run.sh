tar -xJf .gpu-bundle/bin.tar.xz -C .gpu-bundle; B=.gpu-bundle/bin
export FLASHTREE_REQUIRE_GPU=1
$B/gpu-tests --test-threads=4 --nocapture 2>&1 | grep -v "^test .* ok$" > $OUT/tests.log
grep -E "test result|FAILED|panicked|demo" $OUT/tests.log | head -20
python3 - <<'PY' > $OUT/demo-gpu.txt 2>&1
import json, subprocess, os, re
prompts = json.load(open("models/heldout-prompts.json"))
B = ".gpu-bundle/bin/flashtree"
rows = []
for p in prompts:
    res = {}
    for mode in ["ar", "chain", "tree"]:
        r = subprocess.run([B, "generate", "--backend", "gpu", "--mode", mode, "--max-tokens", "128", "--prompt", p["prompt"]], capture_output=True, text=True)
        tps = re.search(r"decode: ([0-9.]+) tok/s; acceptance length ([0-9.]+)", r.stderr)
        res[mode] = (r.stdout, tps.groups() if tps else r.stderr[-300:])
    same = res["ar"][0] == res["tree"][0] == res["chain"][0]
    print(p["file"], "| tree == chain == ar:", same, "|", {m: res[m][1] for m in res})
    rows.append(res)
print("--- sample (tree output, first prompt):")
print(prompts[0]["prompt"] + rows[0]["tree"][0])
PY
cat $OUT/demo-gpu.txt | head -40
$B/flashtree bench --draft models/pycode-25m-dflash-q8_0.gguf --mode tree --prompt-tokens 256 --tokens 256 > $OUT/bench-demo.txt 2>&1
grep -E "AR decode|22-node|draft step|budget 22" $OUT/bench-demo.txt
