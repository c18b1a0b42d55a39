"""Acceptance lengths of flashtree on the CPU backend over held-out prompts (the model card's table).

For each prompt of PROMPTS_JSON (heldout_prompts.py) runs `flashtree generate` in `ar`, `chain`
and `tree` (budget 22) modes, checks that every mode writes the same text as `ar`, and prints per
prompt (flashtree's figure) and overall (all prompts' tokens from rounds / rounds) acceptance lengths.

Usage: measure.py FLASHTREE TARGET_GGUF DRAFT PROMPTS_JSON MAX_TOKENS [MODES]
"""
import json
import re
import subprocess
import sys


def run(ft, target, draft, mode, prompt, max_tokens):
    cmd = [ft, "generate", "--model", target, "--mode", mode, "--max-tokens", str(max_tokens), "--backend", "cpu",
           "--budget", "22"]
    if mode != "ar":
        cmd += ["--draft", draft]
    p = subprocess.run(cmd, input=prompt.encode(), capture_output=True, check=True)
    err = p.stderr.decode()
    gen = int(re.search(r"tokens: (\d+) generated", err).group(1))
    rounds = int(re.search(r"(\d+) rounds", err).group(1))
    tps = float(re.search(r"decode: ([\d.]+) tok/s", err).group(1))
    al = float(re.search(r"acceptance length ([\d.]+)", err).group(1))
    return p.stdout.decode(), gen, rounds, tps, al


def main():
    ft, target, draft, prompts, max_tokens = sys.argv[1:6]
    modes = (sys.argv[6] if len(sys.argv) > 6 else "ar,chain,tree").split(",")
    totals = {m: [0, 0] for m in modes}
    for i, p in enumerate(json.load(open(prompts))):
        texts, cells = {}, []
        for m in modes:
            text, gen, rounds, tps, al = run(ft, target, draft, m, p["prompt"], max_tokens)
            texts[m] = text
            totals[m][0] += gen - 1  # the first token comes from the prefill, not from a round
            totals[m][1] += rounds
            cells.append(f"{m} {al:.2f} ({tps:.1f} tok/s)")
        same = all(t == texts[modes[0]] for t in texts.values())
        print(f"{i} {p['file']}: " + ", ".join(cells) + ("" if same else "  OUTPUTS DIFFER"), flush=True)
        if not same:
            sys.exit(f"prompt {i}: the modes wrote different text")
    print("overall (tokens from rounds / rounds): " + ", ".join(f"{m} {g / r:.2f}" for m, (g, r) in totals.items()))


if __name__ == "__main__":
    main()
