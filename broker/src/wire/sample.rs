//! Valid requests written from their layouts: the samples that check the
//! layouts against the decoder, and the fuzzer's seeds (`tests/fuzz.rs`
//! includes this file).

use super::scan::{within, Elem, Kind, Schema, Tagged};

/// Writes a valid instance of `schema` in `version` for tests and the
/// fuzzer: every array holds `fill` elements, every string and bytes field
/// `fill` bytes, every known tag valid in `version` is present (and one
/// unknown tag), integers count up from `seed`.
pub fn sample(schema: &'static Schema, version: i16, fill: u8, seed: &mut u8, out: &mut Vec<u8>) {
    let flexible = schema.is_flexible(version);
    for field in schema.fields_in(version) {
        sample_kind(field.kind, version, fill, seed, out);
    }
    if flexible {
        let tags: Vec<&Tagged> = schema
            .tags
            .iter()
            .filter(|t| within(t.versions, version))
            .collect();
        put_uvarint(out, tags.len() as u32 + 1);
        for tag in tags {
            let mut value = Vec::new();
            sample_kind(tag.kind, version, fill, seed, &mut value);
            put_uvarint(out, tag.tag);
            put_uvarint(out, value.len() as u32);
            out.extend(value);
        }
        // An unknown tag, skipped by its size.
        put_uvarint(out, 1000);
        put_uvarint(out, 3);
        out.extend([1, 2, 3]);
    }
}

fn sample_kind(kind: Kind, version: i16, fill: u8, seed: &mut u8, out: &mut Vec<u8>) {
    match kind {
        Kind::One(elem) => sample_elem(elem, version, fill, seed, out),
        Kind::Array(elem) => {
            out.extend(i32::from(fill).to_be_bytes());
            for _ in 0..fill {
                sample_elem(elem, version, fill, seed, out);
            }
        }
        Kind::CompactArray(elem) => {
            put_uvarint(out, u32::from(fill) + 1);
            for _ in 0..fill {
                sample_elem(elem, version, fill, seed, out);
            }
        }
    }
}

fn sample_elem(elem: Elem, version: i16, fill: u8, seed: &mut u8, out: &mut Vec<u8>) {
    let text = |seed: &mut u8| -> Vec<u8> {
        (0..fill)
            .map(|_| {
                *seed = seed.wrapping_add(1);
                b'a' + *seed % 26
            })
            .collect()
    };
    match elem {
        Elem::Fixed(n) => {
            for _ in 0..n {
                *seed = seed.wrapping_add(1);
                // Small values: no integer field is read as a length.
                out.push(*seed % 2);
            }
        }
        Elem::Str => {
            out.extend(i16::from(fill).to_be_bytes());
            out.extend(text(seed));
        }
        Elem::Bytes => {
            out.extend(i32::from(fill).to_be_bytes());
            out.extend(text(seed));
        }
        Elem::CompactStr | Elem::CompactBytes => {
            put_uvarint(out, u32::from(fill) + 1);
            out.extend(text(seed));
        }
        Elem::Struct(schema) => sample(schema, version, fill, seed, out),
    }
}

/// Appends `value` as an unsigned varint.
pub fn put_uvarint(out: &mut Vec<u8>, mut value: u32) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}
