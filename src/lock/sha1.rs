//! SHA-1 as a `const fn`, so the names `EVALSHA` sends for lockrun's scripts are computed by
//! the compiler, not at every start-up (hashing ~8 KB of script text was about 1 % of an
//! uncontended run). Only a script's name for the server's cache: nothing here is about
//! security. Checked against `sha1_smol` for every script in the unit tests.

/// The lowercase hex SHA-1 of `data`, as `SCRIPT LOAD` and `EVALSHA` spell it.
pub const fn hex(data: &[u8]) -> [u8; 40] {
    let digest = digest(data);
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

const fn digest(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    // The message, a 0x80 byte, zeros, and the length in bits (big-endian), in 64-byte blocks.
    let blocks = (data.len() + 9).div_ceil(64);
    let bits = (data.len() as u64).wrapping_mul(8);
    let mut b = 0;
    while b < blocks {
        let mut w = [0u32; 80];
        let mut t = 0;
        while t < 16 {
            let mut word = 0u32;
            let mut k = 0;
            while k < 4 {
                let at = b * 64 + t * 4 + k;
                let byte = if at < data.len() {
                    data[at]
                } else if at == data.len() {
                    0x80
                } else if at >= blocks * 64 - 8 {
                    (bits >> (8 * (blocks * 64 - 1 - at))) as u8
                } else {
                    0
                };
                word = (word << 8) | byte as u32;
                k += 1;
            }
            w[t] = word;
            t += 1;
        }
        while t < 80 {
            w[t] = (w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16]).rotate_left(1);
            t += 1;
        }
        let (mut a, mut bb, mut c, mut d, mut e) = (h[0], h[1], h[2], h[3], h[4]);
        t = 0;
        while t < 80 {
            let (f, k) = match t / 20 {
                0 => ((bb & c) | (!bb & d), 0x5A827999),
                1 => (bb ^ c ^ d, 0x6ED9EBA1),
                2 => ((bb & c) | (bb & d) | (c & d), 0x8F1BBCDC),
                _ => (bb ^ c ^ d, 0xCA62C1D6),
            };
            let temp = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(w[t]);
            e = d;
            d = c;
            c = bb.rotate_left(30);
            bb = a;
            a = temp;
            t += 1;
        }
        h[0] = h[0].wrapping_add(a);
        h[1] = h[1].wrapping_add(bb);
        h[2] = h[2].wrapping_add(c);
        h[3] = h[3].wrapping_add(d);
        h[4] = h[4].wrapping_add(e);
        b += 1;
    }
    let mut out = [0u8; 20];
    let mut i = 0;
    while i < 5 {
        let be = h[i].to_be_bytes();
        out[4 * i] = be[0];
        out[4 * i + 1] = be[1];
        out[4 * i + 2] = be[2];
        out[4 * i + 3] = be[3];
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(data: &[u8]) {
        let want = sha1_smol::Sha1::from(data).digest().to_string();
        assert_eq!(
            std::str::from_utf8(&hex(data)).unwrap(),
            want,
            "{} bytes",
            data.len()
        );
    }

    #[test]
    fn matches_sha1_smol_at_every_padding_boundary() {
        assert_eq!(
            std::str::from_utf8(&hex(b"abc")).unwrap(),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in 0..data.len() {
            check(&data[..len]);
        }
    }
}
