//! The bounded pre-scan: every request frame is walked against its layout
//! (the `schema` module, generated from the decoders' own schemas)
//! before anything decodes it, and refused if any array count, string or
//! bytes length claims more than the bytes left.
//!
//! Why: the decoding crate reserves `count × size_of::<T>()` for an array
//! as soon as it reads the count, so 24 bytes claiming 2³¹−1 topics abort
//! the process. After the scan, an array of `n` elements has at least
//! `n × min_len(element)` bytes behind it, so what the decoder reserves is
//! bounded by the frame's length times `size_of::<T>() / min_len` (a small
//! constant per message type), whatever the decoder does. Kafka's own
//! parsers make the same check ("Tried to allocate a collection of size N,
//! but there are only M bytes remaining").
//!
//! The walk mirrors the decoder step for step: fixed-size fields, `i16`- or
//! varint-prefixed strings, `i32`- or varint-prefixed bytes and arrays,
//! and, in flexible versions, a tagged-field section per struct (a known
//! tag is read in place, as the decoder reads it; an unknown one is
//! skipped by its size). It allocates nothing, and its time is linear in
//! the frame (every element or tag it loops over consumes a byte).

use kafka_protocol::messages::ApiKey;

use super::schema;

/// A field's element type.
#[derive(Clone, Copy, Debug)]
pub enum Elem {
    /// A fixed-size field of this many bytes (ints, booleans, uuids).
    Fixed(u8),
    /// A string with an `i16` length (-1: null).
    Str,
    /// A string with a varint length plus one (0: null).
    CompactStr,
    /// Bytes with an `i32` length (-1: null).
    Bytes,
    /// Bytes with a varint length plus one (0: null).
    CompactBytes,
    /// A nested struct.
    Struct(&'static Schema),
}

/// A field: one element, or an array of them.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// One element.
    One(Elem),
    /// An array with an `i32` count (-1: null).
    Array(Elem),
    /// An array with a varint count plus one (0: null).
    CompactArray(Elem),
}

/// A field of a struct, present in some versions.
#[derive(Debug)]
pub struct Field {
    /// The version ranges (inclusive) it is present in.
    pub versions: &'static [(i16, i16)],
    /// Its wire type.
    pub kind: Kind,
}

/// A known tagged field of a struct.
#[derive(Debug)]
pub struct Tagged {
    /// Its tag.
    pub tag: u32,
    /// The versions it is valid in; elsewhere the decoder refuses it.
    pub versions: &'static [(i16, i16)],
    /// Its wire type.
    pub kind: Kind,
}

/// The layout of a struct on the wire.
#[derive(Debug)]
pub struct Schema {
    /// Its name in the protocol.
    pub name: &'static str,
    /// The newest version the decoder knows.
    pub max_version: i16,
    /// The versions with compact lengths and tagged fields.
    pub flexible: &'static [(i16, i16)],
    /// Its fields, in wire order.
    pub fields: &'static [Field],
    /// Its known tagged fields.
    pub tags: &'static [Tagged],
}

/// Whether `version` is in one of `ranges`.
pub fn within(ranges: &[(i16, i16)], version: i16) -> bool {
    ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&version))
}

impl Schema {
    /// Whether `version` is flexible.
    pub fn is_flexible(&self, version: i16) -> bool {
        within(self.flexible, version)
    }

    /// The fields present in `version`.
    pub fn fields_in(&self, version: i16) -> impl Iterator<Item = &'static Field> + '_ {
        let fields: &'static [Field] = self.fields;
        fields.iter().filter(move |f| within(f.versions, version))
    }

    /// The known tag `tag`, if any.
    pub fn tag(&self, tag: u32) -> Option<&'static Tagged> {
        let tags: &'static [Tagged] = self.tags;
        tags.iter().find(|t| t.tag == tag)
    }

    /// The fewest bytes it takes on the wire in `version`.
    pub fn min_len(&'static self, version: i16) -> usize {
        let fields: usize = self
            .fields_in(version)
            .map(|f| f.kind.min_len(version))
            .sum();
        fields + usize::from(self.is_flexible(version))
    }
}

impl Kind {
    /// The fewest bytes it takes on the wire.
    pub fn min_len(self, version: i16) -> usize {
        match self {
            Kind::One(elem) => elem.min_len(version),
            Kind::Array(_) => 4,
            Kind::CompactArray(_) => 1,
        }
    }
}

impl Elem {
    /// The fewest bytes it takes on the wire.
    pub fn min_len(self, version: i16) -> usize {
        match self {
            Elem::Fixed(n) => usize::from(n),
            Elem::Str => 2,
            Elem::Bytes => 4,
            Elem::CompactStr | Elem::CompactBytes => 1,
            Elem::Struct(schema) => schema.min_len(version),
        }
    }
}

/// The layout of `key`'s request, if it has one here.
pub fn request_schema(key: ApiKey) -> Option<&'static Schema> {
    Some(match key {
        ApiKey::Produce => &schema::PRODUCE_REQUEST,
        ApiKey::Fetch => &schema::FETCH_REQUEST,
        ApiKey::ListOffsets => &schema::LIST_OFFSETS_REQUEST,
        ApiKey::Metadata => &schema::METADATA_REQUEST,
        // ACLs, SCRAM credentials, DescribeCluster.
        ApiKey::CreateAcls => &schema::CREATE_ACLS_REQUEST,
        ApiKey::DescribeAcls => &schema::DESCRIBE_ACLS_REQUEST,
        ApiKey::DeleteAcls => &schema::DELETE_ACLS_REQUEST,
        ApiKey::DescribeUserScramCredentials => &schema::DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST,
        ApiKey::AlterUserScramCredentials => &schema::ALTER_USER_SCRAM_CREDENTIALS_REQUEST,
        ApiKey::DescribeCluster => &schema::DESCRIBE_CLUSTER_REQUEST,
        ApiKey::ApiVersions => &schema::API_VERSIONS_REQUEST,
        ApiKey::FindCoordinator => &schema::FIND_COORDINATOR_REQUEST,
        ApiKey::JoinGroup => &schema::JOIN_GROUP_REQUEST,
        ApiKey::SyncGroup => &schema::SYNC_GROUP_REQUEST,
        ApiKey::Heartbeat => &schema::HEARTBEAT_REQUEST,
        ApiKey::LeaveGroup => &schema::LEAVE_GROUP_REQUEST,
        ApiKey::OffsetCommit => &schema::OFFSET_COMMIT_REQUEST,
        ApiKey::OffsetFetch => &schema::OFFSET_FETCH_REQUEST,
        ApiKey::InitProducerId => &schema::INIT_PRODUCER_ID_REQUEST,
        ApiKey::CreateTopics => &schema::CREATE_TOPICS_REQUEST,
        ApiKey::DeleteTopics => &schema::DELETE_TOPICS_REQUEST,
        ApiKey::ListGroups => &schema::LIST_GROUPS_REQUEST,
        ApiKey::DescribeGroups => &schema::DESCRIBE_GROUPS_REQUEST,
        ApiKey::DescribeConfigs => &schema::DESCRIBE_CONFIGS_REQUEST,
        ApiKey::CreatePartitions => &schema::CREATE_PARTITIONS_REQUEST,
        ApiKey::AlterConfigs => &schema::ALTER_CONFIGS_REQUEST,
        ApiKey::IncrementalAlterConfigs => &schema::INCREMENTAL_ALTER_CONFIGS_REQUEST,
        ApiKey::DeleteRecords => &schema::DELETE_RECORDS_REQUEST,
        ApiKey::DeleteGroups => &schema::DELETE_GROUPS_REQUEST,
        ApiKey::OffsetDelete => &schema::OFFSET_DELETE_REQUEST,
        _ => return None,
    })
}

/// Why a frame was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScanError {
    /// A field runs past the end of the frame.
    Short {
        /// The struct it is in.
        at: &'static str,
        /// Bytes it needs.
        needed: u64,
        /// Bytes left.
        remaining: usize,
    },
    /// An array claims more elements than the bytes left can hold.
    Count {
        /// The struct it is in.
        at: &'static str,
        /// The count claimed.
        count: u64,
        /// The fewest bytes one element takes.
        element: usize,
        /// Bytes left.
        remaining: usize,
    },
    /// A negative length other than -1 (null).
    Negative {
        /// The struct it is in.
        at: &'static str,
        /// The length.
        length: i32,
    },
    /// A known tag in a version that does not have it.
    Tag {
        /// The struct it is in.
        at: &'static str,
        /// The tag.
        tag: u32,
    },
    /// A version the decoder does not know.
    Version {
        /// The struct.
        at: &'static str,
        /// The version.
        version: i16,
    },
}

impl std::fmt::Display for ScanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScanError::Short {
                at,
                needed,
                remaining,
            } => write!(f, "{at}: a field of {needed} bytes with {remaining} left"),
            ScanError::Count {
                at,
                count,
                element,
                remaining,
            } => write!(
                f,
                "{at}: {count} elements of at least {element} bytes with {remaining} bytes left"
            ),
            ScanError::Negative { at, length } => write!(f, "{at}: a length of {length}"),
            ScanError::Tag { at, tag } => write!(f, "{at}: tag {tag} is not valid here"),
            ScanError::Version { at, version } => write!(f, "{at}: no version {version}"),
        }
    }
}

impl std::error::Error for ScanError {}

/// A cursor over a frame.
struct Cursor<'a> {
    /// The frame.
    bytes: &'a [u8],
    /// Where the next field starts.
    at: usize,
}

impl Cursor<'_> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    fn skip(&mut self, n: u64, at: &'static str) -> Result<(), ScanError> {
        match usize::try_from(n) {
            Ok(n) if n <= self.remaining() => {
                self.at += n;
                Ok(())
            }
            _ => Err(ScanError::Short {
                at,
                needed: n,
                remaining: self.remaining(),
            }),
        }
    }

    fn take<const N: usize>(&mut self, at: &'static str) -> Result<[u8; N], ScanError> {
        let start = self.at;
        self.skip(N as u64, at)?;
        Ok(self.bytes[start..self.at].try_into().expect("N bytes"))
    }

    fn i16(&mut self, at: &'static str) -> Result<i16, ScanError> {
        Ok(i16::from_be_bytes(self.take(at)?))
    }

    fn i32(&mut self, at: &'static str) -> Result<i32, ScanError> {
        Ok(i32::from_be_bytes(self.take(at)?))
    }

    /// An unsigned varint exactly as the decoder reads it: at most five
    /// bytes, high bits past 32 dropped.
    fn uvarint(&mut self, at: &'static str) -> Result<u32, ScanError> {
        let mut value = 0u32;
        for i in 0..5 {
            let [b] = self.take::<1>(at)?;
            value |= (u32::from(b) & 0x7f).wrapping_shl(i * 7);
            if b < 0x80 {
                break;
            }
        }
        Ok(value)
    }

    /// A length or count with `i32` or `i16` framing: `None` for null.
    fn signed_len(&mut self, length: i32, at: &'static str) -> Result<Option<u64>, ScanError> {
        match length {
            -1 => Ok(None),
            n if n < 0 => Err(ScanError::Negative { at, length: n }),
            n => Ok(Some(n as u64)),
        }
    }

    fn elem(&mut self, elem: Elem, version: i16, at: &'static str) -> Result<(), ScanError> {
        match elem {
            Elem::Fixed(n) => self.skip(u64::from(n), at),
            Elem::Str => {
                let length = i32::from(self.i16(at)?);
                let n = self.signed_len(length, at)?;
                self.skip(n.unwrap_or(0), at)
            }
            Elem::Bytes => {
                let length = self.i32(at)?;
                let n = self.signed_len(length, at)?;
                self.skip(n.unwrap_or(0), at)
            }
            Elem::CompactStr | Elem::CompactBytes => {
                let n = self.uvarint(at)?;
                self.skip(u64::from(n.saturating_sub(1)), at)
            }
            Elem::Struct(schema) => self.schema(schema, version),
        }
    }

    /// `count` elements, once the bytes left are known to hold them.
    fn elems(
        &mut self,
        count: u64,
        elem: Elem,
        version: i16,
        at: &'static str,
    ) -> Result<(), ScanError> {
        let element = elem.min_len(version).max(1);
        if count.saturating_mul(element as u64) > self.remaining() as u64 {
            return Err(ScanError::Count {
                at,
                count,
                element,
                remaining: self.remaining(),
            });
        }
        for _ in 0..count {
            self.elem(elem, version, at)?;
        }
        Ok(())
    }

    fn kind(&mut self, kind: Kind, version: i16, at: &'static str) -> Result<(), ScanError> {
        match kind {
            Kind::One(elem) => self.elem(elem, version, at),
            Kind::Array(elem) => {
                let length = self.i32(at)?;
                match self.signed_len(length, at)? {
                    Some(count) => self.elems(count, elem, version, at),
                    None => Ok(()),
                }
            }
            Kind::CompactArray(elem) => match self.uvarint(at)? {
                0 => Ok(()),
                n => self.elems(u64::from(n - 1), elem, version, at),
            },
        }
    }

    fn schema(&mut self, schema: &'static Schema, version: i16) -> Result<(), ScanError> {
        let at = schema.name;
        if !(0..=schema.max_version).contains(&version) {
            return Err(ScanError::Version { at, version });
        }
        for field in schema.fields_in(version) {
            self.kind(field.kind, version, at)?;
        }
        if schema.is_flexible(version) {
            let count = self.uvarint(at)?;
            // A tag and its size take a byte each at least.
            if u64::from(count) * 2 > self.remaining() as u64 {
                return Err(ScanError::Count {
                    at,
                    count: count.into(),
                    element: 2,
                    remaining: self.remaining(),
                });
            }
            for _ in 0..count {
                let tag = self.uvarint(at)?;
                let size = self.uvarint(at)?;
                match schema.tag(tag) {
                    // Read in place, as the decoder reads it.
                    Some(known) if within(known.versions, version) => {
                        self.kind(known.kind, version, at)?;
                    }
                    Some(_) => return Err(ScanError::Tag { at, tag }),
                    None => self.skip(u64::from(size), at)?,
                }
            }
        }
        Ok(())
    }
}

/// Scans a request frame (without its length prefix): its header in
/// `header_version`, then `schema` in `version`. Returns the bytes the walk
/// covered (trailing bytes are left to the decoder, which ignores them).
///
/// # Errors
///
/// [`ScanError`] for the first field, count or length the frame cannot
/// hold.
pub fn scan_request(
    frame: &[u8],
    header_version: i16,
    schema: &'static Schema,
    version: i16,
) -> Result<usize, ScanError> {
    let mut cursor = Cursor {
        bytes: frame,
        at: 0,
    };
    cursor.schema(&schema::REQUEST_HEADER, header_version)?;
    cursor.schema(schema, version)?;
    Ok(cursor.at)
}

#[cfg(test)]
mod tests {
    use super::super::sample::{put_uvarint, sample};
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::messages::{RequestHeader, RequestKind};
    use kafka_protocol::protocol::Decodable;

    /// Every API with a layout, and every version the decoder knows.
    fn every_request() -> impl Iterator<Item = (ApiKey, &'static Schema, i16)> {
        [
            ApiKey::Produce,
            ApiKey::Fetch,
            ApiKey::ListOffsets,
            ApiKey::Metadata,
            // ACLs, SCRAM credentials, DescribeCluster.
            ApiKey::CreateAcls,
            ApiKey::DescribeAcls,
            ApiKey::DeleteAcls,
            ApiKey::DescribeUserScramCredentials,
            ApiKey::AlterUserScramCredentials,
            ApiKey::DescribeCluster,
            ApiKey::ApiVersions,
            ApiKey::FindCoordinator,
            ApiKey::JoinGroup,
            ApiKey::SyncGroup,
            ApiKey::Heartbeat,
            ApiKey::LeaveGroup,
            ApiKey::OffsetCommit,
            ApiKey::OffsetFetch,
            ApiKey::InitProducerId,
            ApiKey::CreateTopics,
            ApiKey::DeleteTopics,
            ApiKey::ListGroups,
            ApiKey::DescribeGroups,
            ApiKey::DescribeConfigs,
            ApiKey::CreatePartitions,
            ApiKey::AlterConfigs,
            ApiKey::IncrementalAlterConfigs,
            ApiKey::DeleteRecords,
            ApiKey::DeleteGroups,
            ApiKey::OffsetDelete,
        ]
        .into_iter()
        .flat_map(|key| {
            let schema = request_schema(key).expect("a layout");
            (0..=schema.max_version).map(move |v| (key, schema, v))
        })
    }

    /// A sample frame: header and request.
    fn frame(key: ApiKey, schema: &'static Schema, version: i16, fill: u8) -> Vec<u8> {
        let header_version = key.request_header_version(version);
        let mut out = Vec::new();
        let mut seed = 0;
        sample(
            &schema::REQUEST_HEADER,
            header_version,
            fill,
            &mut seed,
            &mut out,
        );
        sample(schema, version, fill, &mut seed, &mut out);
        out
    }

    #[test]
    fn every_sample_decodes_to_its_last_byte_so_the_layouts_match_the_decoder() {
        let mut checked = 0;
        for (key, schema, version) in every_request() {
            for fill in 0..3 {
                let bytes = frame(key, schema, version, fill);
                let header_version = key.request_header_version(version);
                assert_eq!(
                    scan_request(&bytes, header_version, schema, version),
                    Ok(bytes.len()),
                    "{key:?} v{version} fill {fill}"
                );
                let mut buf = Bytes::from(bytes);
                RequestHeader::decode(&mut buf, header_version)
                    .unwrap_or_else(|e| panic!("{key:?} v{version} header: {e}"));
                RequestKind::decode(key, &mut buf, version)
                    .unwrap_or_else(|e| panic!("{key:?} v{version} fill {fill}: {e}"));
                assert!(
                    buf.is_empty(),
                    "{key:?} v{version} fill {fill}: {} bytes left",
                    buf.len()
                );
                checked += 1;
            }
        }
        assert!(checked > 400, "{checked} samples");
    }

    #[test]
    fn a_count_beyond_the_bytes_left_is_refused_before_anything_is_reserved() {
        // Metadata v1: header v1 (key, version, correlation, client id "")
        // then a topic count of 2^31 - 1 and nothing else: 16 bytes.
        let mut bytes = Vec::new();
        bytes.extend(3i16.to_be_bytes());
        bytes.extend(1i16.to_be_bytes());
        bytes.extend(7i32.to_be_bytes());
        bytes.extend(0i16.to_be_bytes());
        bytes.extend(i32::MAX.to_be_bytes());
        let refused = scan_request(&bytes, 1, &schema::METADATA_REQUEST, 1);
        assert!(
            matches!(refused, Err(ScanError::Count { count, .. }) if count == i32::MAX as u64),
            "{refused:?}"
        );
    }

    #[test]
    fn every_truncation_of_a_sample_is_refused_or_covers_less() {
        for (key, schema, version) in every_request() {
            let bytes = frame(key, schema, version, 2);
            let header_version = key.request_header_version(version);
            for cut in 0..bytes.len() {
                if let Ok(covered) = scan_request(&bytes[..cut], header_version, schema, version) {
                    assert!(covered <= cut, "{key:?} v{version}");
                }
            }
        }
    }

    #[test]
    fn varints_are_read_as_the_decoder_reads_them() {
        let mut cursor = Cursor {
            bytes: &[0xff, 0xff, 0xff, 0xff, 0x7f, 0x01],
            at: 0,
        };
        assert_eq!(cursor.uvarint("t"), Ok(u32::MAX));
        assert_eq!(cursor.at, 5, "five bytes at most");
        let mut out = Vec::new();
        put_uvarint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
    }
}
