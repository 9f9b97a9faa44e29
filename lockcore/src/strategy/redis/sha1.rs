//! SHA-1 at compile time: the name `EVALSHA` gives a script is the SHA-1
//! of its source, so each script's name is computed once, by the compiler,
//! from the text that `EVAL` would send.

/// The SHA-1 of `data` as 40 lowercase hex digits, as Redis names scripts.
pub const fn sha1_hex(data: &[u8]) -> [u8; 40] {
    let digest = sha1(data);
    let mut out = [0u8; 40];
    let mut i = 0;
    while i < 20 {
        out[2 * i] = HEX[(digest[i] >> 4) as usize];
        out[2 * i + 1] = HEX[(digest[i] & 15) as usize];
        i += 1;
    }
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// FIPS 180-4's SHA-1.
const fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476, 0xC3D2_E1F0];
    // The message, a 0x80 byte, zeros, and its length in bits, in blocks of 64.
    let total = (data.len() + 9).div_ceil(64) * 64;
    let bits = (data.len() as u64).wrapping_mul(8);
    let mut block = 0;
    while block < total {
        let mut w = [0u32; 80];
        let mut t = 0;
        while t < 16 {
            let mut word = 0u32;
            let mut k = 0;
            while k < 4 {
                let at = block + 4 * t + k;
                let byte = if at < data.len() {
                    data[at]
                } else if at == data.len() {
                    0x80
                } else if at >= total - 8 {
                    (bits >> (8 * (total - 1 - at))) as u8
                } else {
                    0
                };
                word = word << 8 | byte as u32;
                k += 1;
            }
            w[t] = word;
            t += 1;
        }
        while t < 80 {
            w[t] = (w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16]).rotate_left(1);
            t += 1;
        }
        let (mut a, mut b, mut c, mut d, mut e) = (h[0], h[1], h[2], h[3], h[4]);
        t = 0;
        while t < 80 {
            let (f, k) = match t / 20 {
                0 => ((b & c) | (!b & d), 0x5A82_7999),
                1 => (b ^ c ^ d, 0x6ED9_EBA1),
                2 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let next = a.rotate_left(5).wrapping_add(f).wrapping_add(e).wrapping_add(k).wrapping_add(w[t]);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = next;
            t += 1;
        }
        h[0] = h[0].wrapping_add(a);
        h[1] = h[1].wrapping_add(b);
        h[2] = h[2].wrapping_add(c);
        h[3] = h[3].wrapping_add(d);
        h[4] = h[4].wrapping_add(e);
        block += 64;
    }
    let mut out = [0u8; 20];
    let mut i = 0;
    while i < 5 {
        let bytes = h[i].to_be_bytes();
        out[4 * i] = bytes[0];
        out[4 * i + 1] = bytes[1];
        out[4 * i + 2] = bytes[2];
        out[4 * i + 3] = bytes[3];
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_match_the_standards_test_vectors() {
        assert_eq!(&sha1_hex(b""), b"da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(&sha1_hex(b"abc"), b"a9993e364706816aba3e25717850c26c9cd0d89d");
        // 56 bytes: the length no longer fits in the first block.
        assert_eq!(
            &sha1_hex(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            b"84983e441c3bd26ebaae4aa1f95129e5e54670f1"
        );
        assert_eq!(&sha1_hex(&[b'a'; 1000]), b"291e9a6c66994949b57ba5e650361e98fc36b1ba");
    }
}
