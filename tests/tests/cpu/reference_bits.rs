//! The CPU reference's arithmetic is pinned bit for bit: on the shipped demo pair, a 300-token
//! chunked prefill (logits and two layers' outputs), a 23-node tree verify after it (logits and
//! the draft's tapped layers) and a draft block over the prefill's features hash to the values
//! the reference gave before its speed work (`Matrix::matmul`, side-by-side sums; computed by this
//! test on commit `8b96cb6`, its `cli::bench::rand_tokens` made `pub` there, same body). A change of any bit anywhere in these paths fails here: the
//! reference is the definition the GPU kernels are checked against, so its bits change only on
//! purpose — then update the constants below (the failure prints the new ones) and say why in
//! the commit.

use flashtree::cli::bench::rand_tokens;
use flashtree::cli::default_model;
use flashtree_reference::model::{ForwardOptions, Qwen35State};

/// FNV-1a over the f32 bits of every row, in order.
fn fingerprint<'a>(rows: impl IntoIterator<Item = &'a Vec<f32>>) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for row in rows {
        for v in row {
            for b in v.to_bits().to_le_bytes() {
                h ^= b as u64;
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
    }
    h
}

#[test]
fn the_reference_gives_the_same_bits_as_before_its_speed_work() {
    let target = default_model::target();
    let draft_path = default_model::draft_for(&target).expect("the demo pair's draft");
    let w = flashtree::cli::logits::load_model(&target).expect("demo target");
    let (_, d) = flashtree::convert::dflash::load_draft(&draft_path).expect("demo draft");
    let vocab = w.hparams.n_vocab;
    let taps = d.hparams.target_layer_ids.clone();

    // Chunked prefill (chunks of 64: four whole ones and a short one), two layers captured.
    let prompt = rand_tokens(5, 300, vocab);
    let mut st = Qwen35State::new(&w.hparams);
    let opts = ForwardOptions { capture_layers: vec![2, 5], ..Default::default() };
    let pre = w.forward(&mut st, &prompt, &opts).expect("prefill");
    let got_prefill = (fingerprint(&pre.logits), fingerprint(pre.captured.iter().flatten()));

    // A 23-node tree after it: node i's parent is (i − 1) / 2 (a binary tree), the root's none.
    let nodes = rand_tokens(9, 23, vocab);
    let parents: Vec<Option<usize>> = (0..23).map(|i| if i == 0 { None } else { Some((i - 1) / 2) }).collect();
    let tree = w.forward_tree(&st, &nodes, &parents, &taps).expect("tree verify");
    let got_tree = (fingerprint(&tree.logits), fingerprint(tree.captured.iter().flatten()));

    // A draft block over the prefill's features (the draft's taps, concatenated per token).
    let mut st = Qwen35State::new(&w.hparams);
    let opts = ForwardOptions { capture_layers: taps.clone(), ..Default::default() };
    let f = w.forward(&mut st, &prompt, &opts).expect("prefill with taps");
    let features: Vec<Vec<f32>> =
        (0..prompt.len()).map(|t| f.captured.iter().flat_map(|c| c[t].clone()).collect()).collect();
    let mut block = vec![d.hparams.mask_token_id; d.hparams.block_size];
    block[0] = prompt[prompt.len() - 1];
    let out = d.forward(&w.token_embd, w.lm_head(), &features, 0, &block, prompt.len()).expect("draft block");
    let got_draft = fingerprint(&out.logits);

    let got = (got_prefill, got_tree, got_draft);
    let want = (
        (16_946_477_527_238_364_293, 9_945_757_186_280_735_320),
        (3_951_952_730_612_998_534, 3_879_072_685_513_544_445),
        17_735_510_457_276_973_928,
    );
    assert_eq!(got, want, "the reference's bits changed: (prefill logits, layers), (tree logits, taps), draft logits");
}
