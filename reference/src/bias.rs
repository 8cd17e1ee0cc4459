//! The additive-bias abstraction and the one evaluation entry point.
//!
//! Every additive encoding (FIRE, T5, Alibi, Kerple, Sandwich, NoPE) is a function
//! `b_h(i, j)` of a query position `i` and a key position `j`, one value per head. The reference
//! evaluates it literally, pair by pair, for arbitrary lists of positions.

use nalgebra::{DMatrix, DVector};

use crate::error::{Error, Result};
use crate::positions::{self, Position};

/// The pair an encoding is asked about. spec: [conv.layout]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pair {
    /// Query position (the row).
    pub i: Position,
    /// Key position (the column).
    pub j: Position,
    /// The context length of the whole evaluation (see [`positions::context_length`]); only
    /// deviations that normalise by sequence length read it.
    pub length: Position,
}

/// An additive relative position encoding: a per-head bias added to attention logits.
/// spec: [conv.layout], [attn.logits]
pub trait AdditiveBias {
    /// The number of heads `H`.
    fn heads(&self) -> usize;
    /// Checks every parameter against its clause; `bias` is only called after this succeeded.
    fn validate(&self) -> Result<()>;
    /// `b_h(i, j)` for `h = 0..H`.
    fn bias(&self, pair: Pair) -> DVector<f64>;
    /// Checks what only a pair can show: an activation with a restricted domain reached outside
    /// it. Called before `bias` at every pair; valid parameters pass it everywhere for most
    /// encodings. spec: [fire.activation], [num.errors]
    fn check_pair(&self, _pair: Pair) -> Result<()> {
        Ok(())
    }
}

/// A bias tensor laid out `[heads, queries, keys]`. spec: [conv.layout]
#[derive(Debug, Clone, PartialEq)]
pub struct Bias {
    heads: Vec<DMatrix<f64>>,
}

impl Bias {
    /// Builds a bias from one `[queries, keys]` matrix per head; all must share a shape.
    pub fn from_heads(heads: Vec<DMatrix<f64>>) -> Result<Self> {
        let first = heads.first().ok_or_else(|| Error::Empty {
            what: "bias heads".into(),
        })?;
        let shape = first.shape();
        if let Some(bad) = heads.iter().find(|m| m.shape() != shape) {
            return Err(Error::Shape {
                what: "bias heads".into(),
                expected: format!("{shape:?}"),
                got: format!("{:?}", bad.shape()),
            });
        }
        Ok(Self { heads })
    }

    /// `H`.
    pub fn heads(&self) -> usize {
        self.heads.len()
    }

    /// The number of query rows.
    pub fn queries(&self) -> usize {
        self.heads[0].nrows()
    }

    /// The number of key columns.
    pub fn keys(&self) -> usize {
        self.heads[0].ncols()
    }

    /// `[H, Q, K]`.
    pub fn shape(&self) -> [usize; 3] {
        [self.heads(), self.queries(), self.keys()]
    }

    /// Head `h` as a `[queries, keys]` matrix.
    pub fn head(&self, h: usize) -> &DMatrix<f64> {
        &self.heads[h]
    }

    /// The element at head `h`, query row `q`, key column `k`.
    pub fn get(&self, h: usize, q: usize, k: usize) -> f64 {
        self.heads[h][(q, k)]
    }

    /// All values in row-major `[H, Q, K]` order: the wire order of the vectors.
    pub fn to_row_major(&self) -> Vec<f64> {
        let mut out = Vec::with_capacity(self.heads() * self.queries() * self.keys());
        for m in &self.heads {
            for q in 0..m.nrows() {
                out.extend(m.row(q).iter().copied());
            }
        }
        out
    }
}

/// Evaluates `encoding` at every (query, key) pair of the two position lists.
///
/// This is the reference's single entry point: positions are arbitrary (unsorted, repeated,
/// non-contiguous — KV-cache rows and randomised positions are ordinary inputs), the result is
/// `[H, |queries|, |keys|]` and includes keys after the query, whose value each encoding's
/// clause defines. spec: [conv.layout], [conv.future]
pub fn evaluate(
    encoding: &dyn AdditiveBias,
    queries: &[Position],
    keys: &[Position],
) -> Result<Bias> {
    positions::validate("query positions", queries)?;
    positions::validate("key positions", keys)?;
    encoding.validate()?;
    let heads = encoding.heads();
    if heads == 0 {
        return Err(Error::Empty {
            what: "heads".into(),
        });
    }
    let length = positions::context_length(queries, keys);
    let mut out = vec![DMatrix::zeros(queries.len(), keys.len()); heads];
    for (q, &i) in queries.iter().enumerate() {
        for (k, &j) in keys.iter().enumerate() {
            let pair = Pair { i, j, length };
            encoding.check_pair(pair)?;
            let b = encoding.bias(pair);
            if b.len() != heads {
                return Err(Error::Shape {
                    what: "per-pair bias".into(),
                    expected: heads.to_string(),
                    got: b.len().to_string(),
                });
            }
            for (h, m) in out.iter_mut().enumerate() {
                m[(q, k)] = b[h];
            }
        }
    }
    Bias::from_heads(out)
}
