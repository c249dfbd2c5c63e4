//! The seeded random numbers of the generator: xoshiro256** (Blackman and
//! Vigna) seeded through splitmix64, and the few distributions the
//! Lublin–Feitelson model draws from (uniform, exponential, gamma).
//!
//! Why our own: 40 lines against two crates, and the same seed must give
//! the same workload forever (a crate's algorithm may change between
//! versions). Gamma variates use Marsaglia and Tsang (2000), with the
//! usual boost for shape < 1; the model's reference C code sums
//! exponentials instead, which gives the same distribution.
//!
//! Known fault: not cryptographic, and not meant to be.

pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let out = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        out
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in (0, 1]: safe under ln.
    fn open_uniform(&mut self) -> f64 {
        1.0 - self.uniform()
    }

    /// Standard normal (Box–Muller; one of the pair is dropped).
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.open_uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }

    /// Gamma with `shape` > 0 and `scale` > 0 (mean shape × scale).
    pub fn gamma(&mut self, shape: f64, scale: f64) -> f64 {
        if shape < 1.0 {
            let boost = self.open_uniform().powf(1.0 / shape);
            return self.gamma(shape + 1.0, scale) * boost;
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = (1.0 + c * x).powi(3);
            if v <= 0.0 {
                continue;
            }
            let u = self.open_uniform();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v * scale;
            }
        }
    }
}
