//! SentencePiece `tokenizer.model` files (a protobuf `ModelProto`), read for what the
//! converter's `_create_vocab_sentencepiece` asks `SentencePieceProcessor` for: each
//! piece's text, score and type.

use crate::error::{Error, Result};
use std::path::Path;

/// A piece's type in `sentencepiece_model.proto` (`NORMAL` when the field is absent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PieceType {
    /// `NORMAL` (1).
    Normal,
    /// `UNKNOWN` (2).
    Unknown,
    /// `CONTROL` (3).
    Control,
    /// `USER_DEFINED` (4).
    UserDefined,
    /// `UNUSED` (5).
    Unused,
    /// `BYTE` (6).
    Byte,
}

/// One piece of the vocabulary.
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    /// Its text.
    pub text: String,
    /// Its score (0 when absent).
    pub score: f32,
    /// Its type.
    pub kind: PieceType,
}

/// Reads the pieces of `path`; an error names the file and the offset of what is wrong.
pub fn read_pieces(path: &Path) -> Result<Vec<Piece>> {
    let bytes =
        std::fs::read(path).map_err(|e| Error::invalid(format!("{}: {e}", path.display())))?;
    let bad = |what: &str, at: usize| {
        Error::invalid(format!(
            "{}: not a SentencePiece model: {what} at byte {at}",
            path.display()
        ))
    };
    let mut pieces = Vec::new();
    let mut r = Reader { b: &bytes, at: 0 };
    while !r.done() {
        let at = r.at;
        let (field, wire) = r.key().ok_or_else(|| bad("truncated field key", at))?;
        if field == 1 && wire == 2 {
            let msg = r.bytes().ok_or_else(|| bad("truncated piece", at))?;
            pieces.push(piece(msg).ok_or_else(|| bad("malformed piece", at))?);
        } else {
            r.skip(wire).ok_or_else(|| bad("malformed field", at))?;
        }
    }
    Ok(pieces)
}

/// A `SentencePiece` message.
fn piece(b: &[u8]) -> Option<Piece> {
    let mut r = Reader { b, at: 0 };
    let mut p = Piece {
        text: String::new(),
        score: 0.0,
        kind: PieceType::Normal,
    };
    while !r.done() {
        let (field, wire) = r.key()?;
        match (field, wire) {
            (1, 2) => p.text = String::from_utf8(r.bytes()?.to_vec()).ok()?,
            (2, 5) => p.score = f32::from_le_bytes(r.fixed::<4>()?),
            (3, 0) => {
                p.kind = match r.varint()? {
                    1 => PieceType::Normal,
                    2 => PieceType::Unknown,
                    3 => PieceType::Control,
                    4 => PieceType::UserDefined,
                    5 => PieceType::Unused,
                    6 => PieceType::Byte,
                    _ => return None,
                }
            }
            _ => r.skip(wire)?,
        }
    }
    Some(p)
}

/// A protobuf wire-format reader.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn done(&self) -> bool {
        self.at >= self.b.len()
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.b.get(self.at)?;
            self.at += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn key(&mut self) -> Option<(u64, u64)> {
        let k = self.varint()?;
        Some((k >> 3, k & 7))
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.varint()?).ok()?;
        let end = self.at.checked_add(n)?;
        let s = self.b.get(self.at..end)?;
        self.at = end;
        Some(s)
    }

    fn fixed<const N: usize>(&mut self) -> Option<[u8; N]> {
        let s = self.b.get(self.at..self.at + N)?;
        self.at += N;
        s.try_into().ok()
    }

    fn skip(&mut self, wire: u64) -> Option<()> {
        match wire {
            0 => self.varint().map(drop),
            1 => self.fixed::<8>().map(drop),
            2 => self.bytes().map(drop),
            5 => self.fixed::<4>().map(drop),
            _ => None,
        }
    }
}
