//! The line functions: `ourios_line(template_key, params, body)` rebuilds a record's line byte
//! for byte, and `ourios_known(template_key)` says whether the registry can.
//!
//! Both hold one registry snapshot (the templates known when the query started). A record whose
//! key the snapshot does not define has no line: the `logs` view leaves it out, so a reader
//! never sees a record whose template event is not readable (I3 from the reader's side).

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use datafusion::arrow::compute::cast;
use datafusion::common::{Result, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

use crate::registry::Templates;

/// The name of the line function in SQL.
pub const LINE_FN: &str = "ourios_line";
/// The name of the "is this key defined" function in SQL.
pub const KNOWN_FN: &str = "ourios_known";

/// `ourios_line(template_key, params, body) -> Utf8`: the body when the record kept one, else
/// the template the key names with the params put back; null when the key is not defined (or
/// the params do not fit it, which a published record never does).
#[derive(Debug)]
pub(crate) struct LineFn {
    templates: Arc<Templates>,
    signature: Signature,
}

/// `ourios_known(template_key) -> Boolean`: whether the snapshot defines the key.
#[derive(Debug)]
pub(crate) struct KnownFn {
    templates: Arc<Templates>,
    signature: Signature,
}

impl LineFn {
    pub(crate) fn new(templates: Arc<Templates>) -> Self {
        Self {
            templates,
            signature: Signature::any(3, Volatility::Immutable),
        }
    }
}

impl KnownFn {
    pub(crate) fn new(templates: Arc<Templates>) -> Self {
        Self {
            templates,
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

// Two instances are the same function when they read the same snapshot.
macro_rules! snapshot_identity {
    ($t:ty) => {
        impl PartialEq for $t {
            fn eq(&self, other: &Self) -> bool {
                Arc::ptr_eq(&self.templates, &other.templates)
            }
        }
        impl Eq for $t {}
        impl Hash for $t {
            fn hash<H: Hasher>(&self, state: &mut H) {
                Arc::as_ptr(&self.templates).hash(state);
            }
        }
    };
}
snapshot_identity!(LineFn);
snapshot_identity!(KnownFn);

/// The argument as an array of `want` (casting views and large variants DataFusion may hand
/// over; a no-op when the type already matches).
fn arg(args: &ScalarFunctionArgs, i: usize, want: &DataType) -> Result<ArrayRef> {
    let array = args.args[i].to_array(args.number_rows)?;
    if array.data_type() == want {
        Ok(array)
    } else {
        Ok(cast(&array, want)?)
    }
}

fn key_of(array: &dyn Array, row: usize) -> Option<[u8; 16]> {
    let keys = array.as_fixed_size_binary_opt()?;
    if keys.is_null(row) {
        return None;
    }
    keys.value(row).try_into().ok()
}

impl ScalarUDFImpl for LineFn {
    fn name(&self) -> &str {
        LINE_FN
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let keys = args.args[0].to_array(args.number_rows)?;
        if keys.as_fixed_size_binary_opt().is_none() {
            return exec_err!("{LINE_FN}: template_key must be FixedSizeBinary(16)");
        }
        let list_type = DataType::List(Arc::new(arrow_schema::Field::new(
            "item",
            DataType::Utf8,
            true,
        )));
        let params = arg(&args, 1, &list_type)?;
        let params = params.as_list::<i32>();
        let all_params = params.values().as_string::<i32>();
        let bodies = arg(&args, 2, &DataType::Utf8)?;
        let bodies = bodies.as_string::<i32>();
        let mut out = StringBuilder::with_capacity(args.number_rows, args.number_rows * 64);
        let mut scratch: Vec<&str> = Vec::new();
        for row in 0..args.number_rows {
            if bodies.is_valid(row) {
                out.append_value(bodies.value(row));
                continue;
            }
            let Some(template) = key_of(&keys, row).and_then(|k| self.templates.get(&k)) else {
                out.append_null();
                continue;
            };
            scratch.clear();
            if params.is_valid(row) {
                // The row's values, borrowed from the list's shared child array.
                let offsets = params.value_offsets();
                let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
                scratch.extend((start..end).map(|i| all_params.value(i)));
            }
            match template.reconstruct(&scratch) {
                Ok(line) => out.append_value(line),
                Err(_) => out.append_null(),
            }
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

impl ScalarUDFImpl for KnownFn {
    fn name(&self) -> &str {
        KNOWN_FN
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let keys = args.args[0].to_array(args.number_rows)?;
        if keys.as_fixed_size_binary_opt().is_none() {
            return exec_err!("{KNOWN_FN}: template_key must be FixedSizeBinary(16)");
        }
        let mut out = BooleanBuilder::with_capacity(args.number_rows);
        for row in 0..args.number_rows {
            out.append_value(key_of(&keys, row).is_some_and(|k| self.templates.contains_key(&k)));
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// `ourios_first(wal_id, record_lsn, record_index) -> Boolean`: true the first time this
/// function instance meets a record id, false for every later copy. It keeps, per (WAL, frame),
/// a bitset of the record indexes met: about a bit per record, where a hash of whole ids would
/// cost tens of bytes each.
///
/// Stateful, so volatile: DataFusion never pushes it into a scan or evaluates it twice for a
/// row, and a plan that holds one instance deduplicates within one execution. Copies of a
/// record are identical rows, so whichever copy a filter keeps, the others fail it too.
#[derive(Debug)]
pub(crate) struct FirstFn {
    seen: std::sync::Mutex<SeenIds>,
    signature: Signature,
}

/// Per (WAL id, frame lsn), a bitset of the record indexes met.
type SeenIds = std::collections::HashMap<([u8; 16], u64), Vec<u64>>;

/// The name of the first-copy filter in plans.
pub(crate) const FIRST_FN: &str = "ourios_first";

impl FirstFn {
    pub(crate) fn new() -> Self {
        Self {
            seen: std::sync::Mutex::default(),
            signature: Signature::any(3, Volatility::Volatile),
        }
    }
}

impl PartialEq for FirstFn {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}
impl Eq for FirstFn {}
impl Hash for FirstFn {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::ptr::hash(self, state);
    }
}

impl ScalarUDFImpl for FirstFn {
    fn name(&self) -> &str {
        FIRST_FN
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        use arrow_array::types::{UInt32Type, UInt64Type};
        let wal = args.args[0].to_array(args.number_rows)?;
        let lsn = arg(&args, 1, &DataType::UInt64)?;
        let index = arg(&args, 2, &DataType::UInt32)?;
        let (Some(wal), Some(lsn), Some(index)) = (
            wal.as_fixed_size_binary_opt(),
            lsn.as_primitive_opt::<UInt64Type>(),
            index.as_primitive_opt::<UInt32Type>(),
        ) else {
            return exec_err!("{FIRST_FN}: expected (FixedSizeBinary(16), UInt64, UInt32)");
        };
        let mut out = BooleanBuilder::with_capacity(args.number_rows);
        // One lock per batch; the partitions of one execution share the map.
        let mut seen = ourios_recoverable::lock(&self.seen);
        let mut last: Option<([u8; 16], u64)> = None;
        let mut unused = Vec::new();
        let mut bits: &mut Vec<u64> = &mut unused;
        for row in 0..args.number_rows {
            let Ok(id) = <[u8; 16]>::try_from(wal.value(row)) else {
                out.append_value(true);
                continue;
            };
            let key = (id, lsn.value(row));
            if last != Some(key) {
                bits = seen.entry(key).or_default();
                last = Some(key);
            }
            let i = index.value(row) as usize;
            let (word, bit) = (i / 64, 1u64 << (i % 64));
            if bits.len() <= word {
                bits.resize(word + 1, 0);
            }
            let first = bits[word] & bit == 0;
            bits[word] |= bit;
            out.append_value(first);
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}
