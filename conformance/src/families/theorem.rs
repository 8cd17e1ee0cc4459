//! The family of the Theorem 3.1 constructions (`theorem-3-1/`): each construction of the
//! theorem's proof built as a FIRE module and graded against the bias it reproduces.
//! spec: [vec.families], [thm31.statement]

use fire_reference::baselines::{
    Alibi, KerpleLog, KerplePower, OfficialBucketing, SandwichCentred, SandwichPaper, T5Buckets,
    T5Official, T5Simplified,
};
use fire_reference::theorem_3_1 as thm;
use fire_reference::Fire;

use super::baselines::dyadic;
use super::common::{file, fire_enc, range, Draft};
use crate::vectors::flags::Flag;
use crate::vectors::format::VectorFile;
fn construction(
    name: &str,
    desc: &str,
    f: Fire,
    clause: &'static str,
    profile: &'static str,
    p: i64,
) -> Draft {
    Draft::bias(name, desc, fire_enc(&f), range(p + 1), range(p + 1))
        .clauses(&[
            "thm31.statement",
            "thm31.common",
            "thm31.exactness",
            "thm31.future",
            "fire.bias",
            "fire.ablation.no-log",
        ])
        .clauses(&[clause])
        .flags(&[Flag::Construction, Flag::FutureKeys])
        .profile(profile)
}

/// `theorem-3-1/constructions`.
pub(super) fn theorem() -> crate::error::Result<(String, VectorFile)> {
    const P: u64 = 16;
    let p = P as i64;
    let simplified = T5Simplified {
        cap: 6,
        values: dyadic(3, 7, 1),
    };
    let buckets = T5Buckets {
        boundaries: vec![0, 1, 2, 4, 8, 16],
        values: dyadic(3, 6, 2),
    };
    let official = T5Official {
        bucketing: OfficialBucketing::new(8, 20, false)?,
        values: dyadic(2, 8, 3),
    };
    let mut cases = vec![
        construction(
            "t5-simplified",
            "T5 simplified as a 2-hidden-layer Heaviside FIRE",
            thm::t5_simplified(&simplified, P)?,
            "thm31.t5",
            "f32",
            p,
        )
        .flags(&[Flag::Depth2]),
        construction(
            "t5-buckets",
            "T5 general buckets as a Heaviside FIRE",
            thm::t5_buckets(&buckets, P)?,
            "thm31.t5",
            "f32",
            p,
        )
        .flags(&[Flag::Depth2]),
        construction(
            "t5-official",
            "T5 official bucketing through its derived boundaries",
            thm::t5_official(&official, P)?,
            "thm31.t5",
            "f32",
            p,
        )
        .flags(&[Flag::Depth2]),
        construction(
            "t5-steps",
            "the one-hidden-layer step form",
            thm::t5_steps(&buckets, P)?,
            "thm31.t5.steps",
            "f32",
            p,
        ),
        construction(
            "alibi",
            "Alibi as a linear FIRE (no hidden layer)",
            thm::alibi(&Alibi::standard(4)?, P)?,
            "thm31.alibi",
            "f32",
            p,
        )
        .flags(&[Flag::Depth0]),
        construction(
            "kerple-log",
            "Kerple-log with log1p hidden units",
            thm::kerple_log(
                &KerpleLog {
                    r1: vec![0.5, 1.25, 2.0],
                    r2: vec![0.125, 1.5, 3.0],
                },
                P,
            )?,
            "thm31.kerple-log",
            "f32",
            p,
        ),
        construction(
            "sandwich-paper",
            "Sandwich (paper form) with cos hidden units",
            thm::sandwich_paper(
                &SandwichPaper {
                    r1: vec![0.5, 1.0],
                    r2: 4,
                    dim: 8.0,
                },
                P,
            )?,
            "thm31.sandwich",
            "f32",
            p,
        ),
        construction(
            "sandwich-centred",
            "centred Sandwich with cos hidden units",
            thm::sandwich_centred(
                &SandwichCentred {
                    heads: 3,
                    head_dim: 8,
                },
                P,
            )?,
            "thm31.sandwich-centred",
            "f32",
            p,
        ),
    ];
    let power = thm::kerple_power(
        &KerplePower {
            r1: vec![0.5, 1.0, 2.0],
            r2: vec![0.5, 0.5, 1.5],
        },
        P,
    )?;
    for (n, part) in power.parts.into_iter().enumerate() {
        cases.push(
            construction(
                &format!("kerple-power-part-{n}"),
                "one module per run of equal exponents (power(p) hidden units)",
                part,
                "thm31.kerple-power",
                "f32",
                p,
            )
            .clauses(&["thm31.heads"]),
        );
    }
    let beyond = thm::alibi(&Alibi::standard(2)?, P)?;
    cases.push(
        Draft::bias(
            "alibi-beyond-threshold",
            "past P the construction interpolates: −r·(i − j)·P/i, not Alibi",
            fire_enc(&beyond),
            vec![16, 17, 32, 100],
            vec![0, 1, 8, 16, 17, 32, 100],
        )
        .clauses(&["thm31.beyond", "fire.bias"])
        .flags(&[
            Flag::Construction,
            Flag::Depth0,
            Flag::FutureKeys,
            Flag::NonContiguous,
        ])
        .profile("f32"),
    );
    // L0 below its power of two P(L0): the threshold is P = 16 while the positions stop at L0.
    const L0: u64 = 12;
    for (name, f, clause) in [
        (
            "alibi-l0-12",
            thm::alibi(&Alibi::standard(4)?, L0)?,
            "thm31.alibi",
        ),
        (
            "t5-official-l0-12",
            thm::t5_official(&official, L0)?,
            "thm31.t5",
        ),
    ] {
        cases.push(
            Draft::bias(
                name,
                "L0 = 12 is not a power of two: the construction's threshold is P(L0) = 16",
                fire_enc(&f),
                range(L0 as i64),
                range(L0 as i64),
            )
            .clauses(&[
                "thm31.statement",
                "thm31.common",
                "thm31.exactness",
                "thm31.future",
                "fire.bias",
                "fire.ablation.no-log",
            ])
            .clauses(&[clause])
            .flags(&[Flag::Construction, Flag::FutureKeys])
            .profile("f32"),
        );
    }
    file("theorem-3-1", "constructions", "each Theorem 3.1 construction as a FIRE module, on the causal domain up to P = 16 and beyond", cases)
}
