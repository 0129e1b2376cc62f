//! A line's parameters: the values of its template's holes and wildcards, in slot order, their
//! text in one buffer.

use std::fmt;

/// The parameters that rebuild a line from its template ([`crate::Template::reconstruct`]), in
/// slot order.
///
/// A realistic line has a handful (addresses, ids, numbers, the words a wildcard took). Held as
/// one `String` each they are as many allocations, made by the thread that mined the line and
/// freed by whichever published it; here they are two: the text of all of them, and where each
/// one ends.
///
/// ```
/// use ourios_miner::Params;
///
/// let mut params: Params = ["10.0.0.1", "42"].into_iter().collect();
/// params.push("");
/// assert_eq!(params.len(), 3);
/// assert_eq!(params.get(1), Some("42"));
/// assert_eq!(params.iter().collect::<Vec<_>>(), ["10.0.0.1", "42", ""]);
/// assert_eq!(params.text_len(), 10);
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Params {
    /// Every value, one after the other.
    text: String,
    /// Where each value ends in `text` (each starts where the one before it ends).
    ends: Vec<usize>,
}

impl Params {
    /// No parameters.
    pub fn new() -> Self {
        Self::default()
    }

    /// No parameters, with room for `count` of them of `text_bytes` bytes in all.
    pub fn with_capacity(count: usize, text_bytes: usize) -> Self {
        Self {
            text: String::with_capacity(text_bytes),
            ends: Vec::with_capacity(count),
        }
    }

    /// Append a value.
    pub fn push(&mut self, value: &str) {
        self.text.push_str(value);
        self.ends.push(self.text.len());
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `i`th value.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = match i.checked_sub(1) {
            Some(before) => self.ends[before],
            None => 0,
        };
        Some(&self.text[start..end])
    }

    /// The values in order.
    pub fn iter(&self) -> ParamsIter<'_> {
        ParamsIter {
            text: &self.text,
            ends: self.ends.iter(),
            start: 0,
        }
    }

    /// The bytes of all the values together.
    pub fn text_len(&self) -> usize {
        self.text.len()
    }
}

impl fmt::Debug for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<S: AsRef<str>> FromIterator<S> for Params {
    fn from_iter<I: IntoIterator<Item = S>>(values: I) -> Self {
        let mut out = Self::new();
        out.extend(values);
        out
    }
}

impl<S: AsRef<str>> Extend<S> for Params {
    fn extend<I: IntoIterator<Item = S>>(&mut self, values: I) {
        for v in values {
            self.push(v.as_ref());
        }
    }
}

impl<'a> IntoIterator for &'a Params {
    type Item = &'a str;
    type IntoIter = ParamsIter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<S: AsRef<str>> PartialEq<[S]> for Params {
    fn eq(&self, other: &[S]) -> bool {
        self.len() == other.len() && self.iter().zip(other).all(|(a, b)| a == b.as_ref())
    }
}

impl<S: AsRef<str>, const N: usize> PartialEq<[S; N]> for Params {
    fn eq(&self, other: &[S; N]) -> bool {
        *self == other[..]
    }
}

/// The values of a [`Params`], in order.
#[derive(Debug, Clone)]
pub struct ParamsIter<'a> {
    text: &'a str,
    ends: std::slice::Iter<'a, usize>,
    /// Where the next value starts: the end of the one before it.
    start: usize,
}

impl<'a> Iterator for ParamsIter<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<Self::Item> {
        let end = *self.ends.next()?;
        let value = &self.text[self.start..end];
        self.start = end;
        Some(value)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.ends.size_hint()
    }
}

impl ExactSizeIterator for ParamsIter<'_> {}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Values come back by `iter` and `get` as pushed (empty ones and multi-byte letters
        /// included), `text_len` is their bytes together, and two `Params` are equal exactly
        /// when their values are.
        ///
        /// Mutation check (by hand): `get` starting every value at 0, and the iterator not
        /// moving its start on: each fails.
        #[test]
        fn params_keep_each_value_as_pushed(
            values in prop::collection::vec("[a-zé ]{0,4}", 0..8),
            other in prop::collection::vec("[a-zé ]{0,4}", 0..8),
        ) {
            let params: Params = values.iter().collect();
            prop_assert_eq!(params.len(), values.len());
            prop_assert_eq!(params.iter().len(), values.len());
            prop_assert_eq!(params.iter().collect::<Vec<_>>(), values.clone());
            for (i, v) in values.iter().enumerate() {
                prop_assert_eq!(params.get(i), Some(v.as_str()));
            }
            prop_assert_eq!(params.get(values.len()), None);
            prop_assert!(params == values[..]);
            let others: Params = other.iter().collect();
            prop_assert_eq!(params == others, values == other);
            prop_assert_eq!(params.text_len(), values.concat().len());
        }
    }
}
