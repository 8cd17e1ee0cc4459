//! Family `attention/`: causal attention outputs from q, k, v and FIRE parameters, where a bias
//! added before the 1/√d scaling or a mask folded into the bias shows. spec: [vec.families]

use fire_reference::fire::Activation;

use super::common::{default_fire, file, fire_enc, random_fire, random_tensor, range, Draft};
use crate::vectors::flags::Flag;
use crate::vectors::format::{Kind, VectorFile};

const ATTN: &[&str] = &[
    "attn.logits",
    "attn.placement",
    "attn.causal",
    "fire.bias",
    "conv.causal",
];

/// An attention case with head dimension `d` and value dimension `dv`.
#[allow(clippy::too_many_arguments)]
fn attn(
    name: &str,
    desc: &str,
    f: &fire_reference::Fire,
    q: Vec<i64>,
    k: Vec<i64>,
    d: usize,
    dv: usize,
    seed: u64,
) -> Draft {
    let h = f.mlp.heads();
    let mut draft = Draft::bias(name, desc, fire_enc(f), q.clone(), k.clone())
        .kind(Kind::Attention)
        .clauses(ATTN)
        .flags(&[Flag::Attention, Flag::Placement]);
    draft.inputs.q = Some(random_tensor(vec![h, q.len(), d], seed));
    draft.inputs.k = Some(random_tensor(vec![h, k.len(), d], seed + 1));
    draft.inputs.v = Some(random_tensor(vec![h, k.len(), dv], seed + 2));
    draft
}

/// `attention/`.
pub fn attention() -> crate::error::Result<Vec<(String, VectorFile)>> {
    let d = default_fire(4, 32, 1, 31);
    let r = random_fire(4, 8, 1, 801, Activation::Relu);
    let cases = vec![
        attn(
            "default-init-square-8",
            "queries and keys 0..8, d = 4",
            &d,
            range(8),
            range(8),
            4,
            3,
            1,
        )
        .flags(&[Flag::DefaultInit]),
        attn(
            "random-square-12",
            "random parameters crossing L, d = 16 (1/√d = 1/4 separates the placements)",
            &r,
            range(12),
            range(12),
            16,
            3,
            4,
        )
        .flags(&[Flag::RandomParams]),
        attn(
            "kv-cache-row",
            "one decoding step against all earlier keys",
            &r,
            vec![20],
            range(21),
            8,
            3,
            7,
        )
        .flags(&[Flag::KvCache, Flag::RandomParams]),
        attn(
            "non-contiguous",
            "gapped positions; keys after a query carry no weight",
            &r,
            vec![4, 9, 30],
            vec![0, 4, 5, 9, 17, 30, 31],
            8,
            3,
            10,
        )
        .flags(&[Flag::NonContiguous, Flag::FutureKeys, Flag::RandomParams]),
        // The other cases' values are 3 wide, narrower than their keys (a dimension mix-up
        // shows); a layer whose q, k and v come from one projection has d_v = d.
        attn(
            "self-attention-square-16",
            "q, k and v of one width, d = d_v = 16, as a fused-qkv layer has them",
            &r,
            range(16),
            range(16),
            16,
            16,
            13,
        )
        .flags(&[Flag::RandomParams]),
    ];
    Ok(vec![file(
        "attention",
        "causal",
        "causal attention with a FIRE bias",
        cases,
    )?])
}
