//! Tokenizer: a line as `sep_0 tok_1 sep_1 ... tok_n sep_n`, keeping every separator byte.
//!
//! Tokens are maximal runs of non-whitespace characters (`char::is_whitespace`, so Unicode
//! spaces count); separators are the whitespace runs between them, plus the (possibly empty)
//! leading and trailing runs. There are always `n + 1` separators, inner ones non-empty, and the
//! concatenation in order is the line, byte for byte. Each token is masked once here
//! ([`crate::mask`]); the buffers are reused from line to line.

use std::ops::Range;

use crate::fingerprint::{self, Part};
use crate::mask::{Piece, mask_token};

/// One token of a line: its byte range and its masked pieces (none means plain literal text).
#[derive(Clone, Debug)]
pub(crate) struct Tok {
    pub(crate) range: Range<usize>,
    /// Range into [`Tokens::pieces`]; empty for a token with no hole.
    pub(crate) pieces: Range<usize>,
}

/// A tokenized line. Borrow it with [`Tokens::view`] to read tokens and separators.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tokens {
    seps: Vec<Range<usize>>,
    toks: Vec<Tok>,
    /// The fingerprint of each token ([`crate::fingerprint`]).
    fingerprints: Vec<u64>,
    pieces: Vec<Piece>,
}

impl Tokens {
    /// Splits `line` into these buffers, replacing what they held.
    pub(crate) fn fill(&mut self, line: &str) {
        self.seps.clear();
        self.toks.clear();
        self.fingerprints.clear();
        self.pieces.clear();
        let mut sep_start = 0;
        let mut tok_start: Option<usize> = None;
        for (i, c) in line.char_indices() {
            match (c.is_whitespace(), tok_start) {
                (true, Some(start)) => {
                    self.push_token(line, start, i);
                    tok_start = None;
                    sep_start = i;
                }
                (false, None) => {
                    self.seps.push(sep_start..i);
                    tok_start = Some(i);
                }
                _ => {}
            }
        }
        match tok_start {
            Some(start) => {
                self.push_token(line, start, line.len());
                self.seps.push(line.len()..line.len());
            }
            None => self.seps.push(sep_start..line.len()),
        }
    }

    fn push_token(&mut self, line: &str, start: usize, end: usize) {
        let first = self.pieces.len();
        let text = &line[start..end];
        mask_token(text, &mut self.pieces);
        let pieces = &self.pieces[first..];
        self.fingerprints.push(if pieces.is_empty() {
            fingerprint::text(text)
        } else {
            fingerprint::masked(pieces.iter().map(|p| match p.hole {
                Some(kind) => Part::Hole(kind),
                None => Part::Lit(&text[p.range()]),
            }))
        });
        self.toks.push(Tok {
            range: start..end,
            pieces: first..self.pieces.len(),
        });
    }

    /// The tokens of `line`, which must be the line last passed to [`Tokens::fill`].
    pub(crate) fn view<'a>(&'a self, line: &'a str) -> LineView<'a> {
        LineView { line, t: self }
    }
}

/// A tokenized line with its text.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LineView<'a> {
    line: &'a str,
    t: &'a Tokens,
}

impl<'a> LineView<'a> {
    pub(crate) fn token_count(&self) -> usize {
        self.t.toks.len()
    }

    pub(crate) fn sep(&self, i: usize) -> &'a str {
        &self.line[self.t.seps[i].clone()]
    }

    pub(crate) fn token(&self, i: usize) -> &'a str {
        &self.line[self.t.toks[i].range.clone()]
    }

    /// The fingerprint of every token, in order.
    pub(crate) fn fingerprints(&self) -> &'a [u64] {
        &self.t.fingerprints
    }

    /// The masked pieces of token `i`; empty when the token is plain literal text.
    pub(crate) fn pieces(&self, i: usize) -> &'a [Piece] {
        &self.t.pieces[self.t.toks[i].pieces.clone()]
    }

    /// The key token `i` descends the prefix tree by: `None` (the wildcard branch) for a token
    /// holding a hole or a digit (Drain's rule), its text otherwise.
    pub(crate) fn tree_key(&self, i: usize) -> Option<&'a str> {
        let text = self.token(i);
        if !self.pieces(i).is_empty() || text.bytes().any(|b| b.is_ascii_digit()) {
            None
        } else {
            Some(text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(line: &str) -> (Vec<String>, Vec<String>) {
        let mut t = Tokens::default();
        t.fill(line);
        let v = t.view(line);
        let seps = (0..=v.token_count()).map(|i| v.sep(i).to_owned()).collect();
        let toks = (0..v.token_count())
            .map(|i| v.token(i).to_owned())
            .collect();
        (seps, toks)
    }

    /// Proves the split keeps every separator byte, including leading, trailing and Unicode
    /// whitespace, and an empty or all-blank line.
    /// Reasoned mutation (not run as a mutant): push `line.len()..line.len()` instead of
    /// `sep_start..line.len()` for a trailing separator and the " a \t" row fails.
    #[test]
    fn tokenize_keeps_separators() {
        let cases: [(&str, &[&str], &[&str]); 6] = [
            ("", &[""], &[]),
            ("   ", &["   "], &[]),
            ("a", &["", ""], &["a"]),
            (" a \t", &[" ", " \t"], &["a"]),
            ("a  b\tc", &["", "  ", "\t", ""], &["a", "b", "c"]),
            ("x\u{3000}y", &["", "\u{3000}", ""], &["x", "y"]),
        ];
        for (line, seps, toks) in cases {
            let (s, t) = split(line);
            assert_eq!(s, seps, "{line:?}");
            assert_eq!(t, toks, "{line:?}");
            let mut joined = s[0].clone();
            for (tok, sep) in t.iter().zip(&s[1..]) {
                joined.push_str(tok);
                joined.push_str(sep);
            }
            assert_eq!(joined, line);
        }
    }
}
