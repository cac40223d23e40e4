//! Reading Redis's replies: stream entries and the numbers the scripts
//! return. Nothing here talks to Redis.

use redis::Value;

use crate::Error;

/// A stream entry's fields and values.
pub(crate) type Fields = Vec<(String, Vec<u8>)>;

/// A stream entry: its id and its fields.
pub(crate) type Entry = (String, Fields);

/// The fields of a stream entry's value list.
fn fields(value: &Value) -> Fields {
    let Value::Array(items) = value else {
        return Vec::new();
    };
    items
        .chunks(2)
        .filter_map(|pair| match pair {
            [Value::BulkString(k), Value::BulkString(v)] => {
                Some((String::from_utf8_lossy(k).into_owned(), v.clone()))
            }
            _ => None,
        })
        .collect()
}

/// The entries `[id, [field, value, …]]` of a stream reply.
pub(crate) fn entries(value: &Value) -> Vec<Entry> {
    let Value::Array(list) = value else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|entry| match entry {
            Value::Array(parts) if parts.len() == 2 => {
                let id = match &parts[0] {
                    Value::BulkString(id) => String::from_utf8_lossy(id).into_owned(),
                    _ => return None,
                };
                Some((id, fields(&parts[1])))
            }
            _ => None,
        })
        .collect()
}

/// The entries of an `XREADGROUP` reply (`[[stream, entries], …]`, or nil).
pub(crate) fn read_group_entries(value: &Value) -> Vec<Entry> {
    let Value::Array(streams) = value else {
        return Vec::new();
    };
    streams
        .iter()
        .filter_map(|stream| match stream {
            Value::Array(parts) => parts.get(1).map(entries),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The entries of an `XAUTOCLAIM` reply (`[cursor, entries, deleted]`).
pub(crate) fn autoclaim_entries(value: &Value) -> Vec<Entry> {
    match value {
        Value::Array(parts) => parts.get(1).map(entries).unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// The delivery count of the one row of an `XPENDING key group id id 1`
/// reply; 1 if the entry is no longer pending.
pub(crate) fn pending_delivery_count(value: &Value) -> Result<u32, Error> {
    match value {
        Value::Array(rows) => match rows.first() {
            Some(Value::Array(row)) => match row.get(3) {
                Some(Value::Int(n)) => Ok(u32::try_from(*n).unwrap_or(u32::MAX)),
                _ => Err(Error::Protocol("an XPENDING row".into())),
            },
            _ => Ok(1),
        },
        _ => Err(Error::Protocol("an XPENDING reply".into())),
    }
}

/// The count of the summary form of an `XPENDING key group` reply.
pub(crate) fn pending_count(value: &Value) -> u64 {
    match value {
        Value::Array(items) => match items.first() {
            Some(Value::Int(n)) => u64::try_from(*n).unwrap_or(0),
            _ => 0,
        },
        _ => 0,
    }
}

/// A whole number of ms a script returned as a string (Lua formats them
/// with `%d`; Redis may store a score as a float).
pub(crate) fn millis(s: &str) -> Result<f64, Error> {
    s.parse::<f64>()
        .map_err(|_| Error::Protocol(format!("a time of {s:?}")))
}

/// A number field of a stream entry, 0 when absent or malformed.
pub(crate) fn number_field(fields: &Fields, name: &str) -> u64 {
    field(fields, name)
        .and_then(|v| std::str::from_utf8(v).ok()?.parse::<f64>().ok())
        .map_or(0, |n| n as u64)
}

/// A field of a stream entry.
pub(crate) fn field<'a>(fields: &'a Fields, name: &str) -> Option<&'a [u8]> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn an_xreadgroup_reply_yields_its_entries() {
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("{ns}:stream"),
            Value::Array(vec![Value::Array(vec![
                bulk("1-0"),
                Value::Array(vec![bulk("id"), bulk("a"), bulk("deadline"), bulk("12")]),
            ])]),
        ])]);
        let got = read_group_entries(&reply);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, "1-0");
        assert_eq!(field(&got[0].1, "id"), Some(&b"a"[..]));
        assert_eq!(number_field(&got[0].1, "deadline"), 12);
        assert_eq!(number_field(&got[0].1, "missing"), 0);
        assert!(read_group_entries(&Value::Nil).is_empty());
    }

    #[test]
    fn xpending_rows_give_the_delivery_count() {
        let row = Value::Array(vec![Value::Array(vec![
            bulk("1-0"),
            bulk("c"),
            Value::Int(10),
            Value::Int(3),
        ])]);
        assert_eq!(pending_delivery_count(&row).unwrap(), 3);
        assert_eq!(pending_delivery_count(&Value::Array(vec![])).unwrap(), 1);
        assert!(pending_delivery_count(&Value::Nil).is_err());
    }
}
