//! Element-wise functions in generated kernels. `exp`/`log`/`tanh` have no PTX
//! instruction of full precision and there is no libdevice here, so in f32 and
//! f64 programs they are generated in f64 from their series. The kernels of a
//! 16-bit program (`bf16`/`f16` storage, computed in f32) evaluate them on f32
//! values in f32 instead, from the approximate `ex2`/`lg2` instructions: its
//! results are rounded to 8 or 11 significant bits and checked at 2e-2 or 3e-3,
//! far coarser than those instructions' error (about 2^-22 relative), and the
//! f64 series cost some 50 f64 instructions per element.

use super::gen::{Gen, Mode};
use super::{err, CodegenError, KOperand};
use crate::sema::hir::Func;
use inkwell::module::Linkage;
use inkwell::values::{FloatValue, IntValue};
use inkwell::FloatPredicate;

impl<'ctx> Gen<'_, 'ctx> {
    /// `x` through operand `o`'s element-wise function, when it has one.
    pub(super) fn apply_operand_func(
        &mut self,
        o: &KOperand,
        x: FloatValue<'ctx>,
    ) -> Result<FloatValue<'ctx>, CodegenError> {
        match &o.func {
            Some(name) => {
                let func = Func::from_name(name).ok_or_else(|| err(format!("unknown function {name}")))?;
                self.apply(func, x)
            }
            None => Ok(x),
        }
    }

    /// `f(x)` as [`Func::apply`] defines it. In a 16-bit program ([`Gen::half`])
    /// an f32 `x` is computed in f32 (`exp`/`log` from `ex2.approx`/`lg2.approx`,
    /// the others from those, `div.rn.f32`, `sqrt.rn.f32`); otherwise through f64
    /// (the series of [`Gen::math`]).
    pub(super) fn apply(&mut self, func: Func, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let t = x.get_type();
        let ct = if self.half && t == self.ctx.f32_type() { t } else { self.ctx.f64_type() };
        let x = if t != ct { self.b.build_float_ext(x, ct, "ext")? } else { x };
        let one = ct.const_float(1.0);
        let r = match func {
            Func::Exp => self.exp(x)?,
            // The lowering of complex types leaves only real values here.
            Func::Conj => x,
            Func::Log => self.log(x)?,
            Func::Sqrt => self.fcall("llvm.sqrt", x)?,
            Func::Abs => self.fcall("llvm.fabs", x)?,
            Func::Recip => self.b.build_float_div(one, x, "recip")?,
            Func::Relu => {
                let f = self.intrinsic("llvm.maxnum", &[ct.into()])?;
                self.call(f, &[x.into(), ct.const_zero().into()])?.into_float_value()
            }
            Func::Tanh => self.tanh(x)?,
            // exp(-x) = inf for very negative x: 1/inf = 0, x/inf = -0.
            Func::Sigmoid | Func::Silu => {
                let neg = self.b.build_float_neg(x, "neg")?;
                let e = self.exp(neg)?;
                let d = self.b.build_float_add(one, e, "den")?;
                let num = if func == Func::Sigmoid { one } else { x };
                self.b.build_float_div(num, d, "sig")?
            }
            Func::Gelu => {
                let x3 = self.b.build_float_mul(self.b.build_float_mul(x, x, "x2")?, x, "x3")?;
                let inner =
                    self.b.build_float_add(x, self.b.build_float_mul(ct.const_float(0.044715), x3, "a")?, "in")?;
                let kk = (2.0 / std::f64::consts::PI).sqrt();
                let arg = self.b.build_float_mul(ct.const_float(kk), inner, "s")?;
                let th = self.tanh(arg)?;
                let h = self.b.build_float_mul(ct.const_float(0.5), x, "h")?;
                self.b.build_float_mul(h, self.b.build_float_add(one, th, "1p")?, "gelu")?
            }
        };
        Ok(if t != ct { self.b.build_float_trunc(r, t, "trunc")? } else { r })
    }

    /// `exp(x)` in `x`'s type: f64 by the series, f32 by [`Gen::exp32`].
    fn exp(&mut self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        if x.get_type() == self.ctx.f64_type() {
            self.math("tcc_exp", x)
        } else {
            self.exp32(x)
        }
    }

    /// `log(x)` in `x`'s type: f64 by the series; f32 as `lg2(x) · ln 2`
    /// (`lg2.approx.ftz.f32` on the device, `llvm.log2` on the host).
    fn log(&mut self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        if x.get_type() == self.ctx.f64_type() {
            return self.math("tcc_log", x);
        }
        let l = self.approx("llvm.nvvm.lg2.approx.ftz.f", "llvm.log2", x)?;
        let ln2 = self.ctx.f32_type().const_float(std::f64::consts::LN_2);
        Ok(self.b.build_float_mul(l, ln2, "log")?)
    }

    /// `tanh(x)` in `x`'s type: f64 by the series; f32 as `1 - 2/(exp(2x) + 1)`
    /// (±1 where `exp(2x)` overflows or vanishes).
    fn tanh(&mut self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        if x.get_type() == self.ctx.f64_type() {
            return self.math("tcc_tanh", x);
        }
        let f32t = self.ctx.f32_type();
        let one = f32t.const_float(1.0);
        let e = self.exp32(self.b.build_float_mul(x, f32t.const_float(2.0), "2x")?)?;
        let q = self.b.build_float_div(f32t.const_float(2.0), self.b.build_float_add(e, one, "d")?, "q")?;
        Ok(self.b.build_float_sub(one, q, "tanh")?)
    }

    /// f32 `exp(x) = 2^(x log2 e)`: `ex2.approx.ftz.f32` on the device (as
    /// CUDA's `__expf`; subnormal results flush to 0), `llvm.exp2` (libm's
    /// `exp2f`) on the host.
    fn exp32(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let log2e = self.ctx.f32_type().const_float(std::f64::consts::LOG2_E);
        let t = self.b.build_float_mul(x, log2e, "t")?;
        self.approx("llvm.nvvm.ex2.approx.ftz.f", "llvm.exp2", t)
    }

    /// An f32 function: the NVVM intrinsic `device` (an approximate PTX
    /// instruction) on the device, the overloaded LLVM intrinsic `host` on the host.
    fn approx(&self, device: &str, host: &str, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        match self.mode {
            Mode::Device => {
                let f = self.intrinsic(device, &[])?;
                Ok(self.call(f, &[x.into()])?.into_float_value())
            }
            Mode::Host => self.fcall(host, x),
        }
    }

    /// Calls (generating once) one of the module's `f64 → f64` math functions.
    pub(super) fn math(&mut self, name: &str, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let f = match self.module.get_function(name) {
            Some(f) => f,
            None => {
                let f64t = self.ctx.f64_type();
                let f = self.module.add_function(name, f64t.fn_type(&[f64t.into()], false), Some(Linkage::Internal));
                let saved_block = self.b.get_insert_block();
                let saved_fn = self.func;
                self.func = Some(f);
                let e = self.ctx.append_basic_block(f, "entry");
                self.b.position_at_end(e);
                let a = f.get_nth_param(0).expect("x").into_float_value();
                let r = match name {
                    "tcc_exp" => self.exp64(a)?,
                    "tcc_log" => self.log64(a)?,
                    _ => self.tanh64(a)?,
                };
                self.b.build_return(Some(&r))?;
                self.func = saved_fn;
                if let Some(bb) = saved_block {
                    self.b.position_at_end(bb);
                }
                f
            }
        };
        Ok(self.call(f, &[x.into()])?.into_float_value())
    }

    pub(super) fn fc(&self, v: f64) -> FloatValue<'ctx> {
        self.ctx.f64_type().const_float(v)
    }

    pub(super) fn fma(
        &self,
        a: FloatValue<'ctx>,
        b: FloatValue<'ctx>,
        c: FloatValue<'ctx>,
    ) -> Result<FloatValue<'ctx>, CodegenError> {
        let f = self.intrinsic("llvm.fma", &[self.ctx.f64_type().into()])?;
        Ok(self.call(f, &[a.into(), b.into(), c.into()])?.into_float_value())
    }

    /// `2^k` for `k` in `[-1022, 1023]` (an i64), built from its bits.
    fn pow2(&self, k: IntValue<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let e = self.b.build_int_add(k, self.i64c(1023), "e")?;
        let bits = self.b.build_left_shift(e, self.i64c(52), "bits")?;
        Ok(self.b.build_bit_cast(bits, self.ctx.f64_type(), "p2")?.into_float_value())
    }

    /// `exp(x)`: `x = k ln2 + r`, `|r| ≤ ln2/2`, Taylor to degree 13 (error
    /// below 1e-17 relative), times `2^k` in two steps (subnormals, overflow).
    fn exp64(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let b = &self.b;
        let f64t = self.ctx.f64_type();
        let maxf = self.intrinsic("llvm.maxnum", &[f64t.into()])?;
        let minf = self.intrinsic("llvm.minnum", &[f64t.into()])?;
        let xc = self.call(maxf, &[x.into(), self.fc(-746.0).into()])?.into_float_value();
        let xc = self.call(minf, &[xc.into(), self.fc(710.0).into()])?.into_float_value();
        let kf = self.fcall("llvm.rint", b.build_float_mul(xc, self.fc(std::f64::consts::LOG2_E), "t")?)?;
        let nk = b.build_float_neg(kf, "nk")?;
        let r = self.fma(nk, self.fc(6.931_471_803_691_238e-1), xc)?;
        let r = self.fma(nk, self.fc(1.908_214_929_270_587_7e-10), r)?;
        // Horner: Σ r^n / n!, n = 0..=13
        let mut p = self.fc(1.0 / 6_227_020_800.0);
        let mut fact = 6_227_020_800.0f64;
        for n in (0..13).rev() {
            fact /= (n + 1) as f64;
            p = self.fma(p, r, self.fc(1.0 / fact))?;
        }
        let ki = b.build_float_to_signed_int(kf, self.ctx.i64_type(), "ki")?;
        let k1 = b.build_int_signed_div(ki, self.i64c(2), "k1")?;
        let k2 = b.build_int_sub(ki, k1, "k2")?;
        let y = b.build_float_mul(b.build_float_mul(p, self.pow2(k1)?, "y1")?, self.pow2(k2)?, "y")?;
        let nan = b.build_float_compare(FloatPredicate::UNO, x, x, "nan")?;
        Ok(b.build_select(nan, x, y, "exp")?.into_float_value())
    }

    /// `log(x)`: `x = m 2^e`, `m ∈ [√½, √2)`, `log m = 2 atanh((m-1)/(m+1))`
    /// by its series to `f^25`; special values as IEEE `log`.
    fn log64(&self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let b = &self.b;
        let i64t = self.ctx.i64_type();
        let f64t = self.ctx.f64_type();
        // Subnormals: scale by 2^54 first.
        let tiny = b.build_float_compare(
            FloatPredicate::OLT,
            self.fcall("llvm.fabs", x)?,
            self.fc(f64::MIN_POSITIVE),
            "tiny",
        )?;
        let xs = b
            .build_select(tiny, b.build_float_mul(x, self.fc(18014398509481984.0), "xs")?, x, "xs")?
            .into_float_value();
        let adj = b.build_select(tiny, i64t.const_int((-54i64) as u64, true), self.i64c(0), "adj")?.into_int_value();
        let bits = b.build_bit_cast(xs, i64t, "bits")?.into_int_value();
        let ebits = b.build_and(b.build_right_shift(bits, self.i64c(52), false, "eb")?, self.i64c(0x7ff), "eb")?;
        let e = b.build_int_add(b.build_int_sub(ebits, self.i64c(1023), "e")?, adj, "e")?;
        let mbits = b.build_or(
            b.build_and(bits, self.i64c(0x000f_ffff_ffff_ffff), "mb")?,
            self.i64c(0x3ff0_0000_0000_0000),
            "mb",
        )?;
        let m = b.build_bit_cast(mbits, f64t, "m")?.into_float_value();
        let big = b.build_float_compare(FloatPredicate::OGT, m, self.fc(std::f64::consts::SQRT_2), "big")?;
        let m = b.build_select(big, b.build_float_mul(m, self.fc(0.5), "mh")?, m, "m")?.into_float_value();
        let e = b.build_select(big, b.build_int_add(e, self.i64c(1), "e1")?, e, "e")?.into_int_value();
        let f =
            b.build_float_div(b.build_float_sub(m, self.fc(1.0), "n")?, b.build_float_add(m, self.fc(1.0), "d")?, "f")?;
        let s = b.build_float_mul(f, f, "s")?;
        let mut p = self.fc(1.0 / 25.0);
        for n in (0..12).rev() {
            p = self.fma(p, s, self.fc(1.0 / (2 * n + 1) as f64))?;
        }
        let logm = b.build_float_mul(b.build_float_mul(f, p, "fp")?, self.fc(2.0), "logm")?;
        let ef = b.build_signed_int_to_float(e, f64t, "ef")?;
        let lo = self.fma(ef, self.fc(1.908_214_929_270_587_7e-10), logm)?;
        let y = self.fma(ef, self.fc(6.931_471_803_691_238e-1), lo)?;
        // x < 0 or NaN → NaN; 0 → -inf; +inf → +inf.
        let y = b
            .build_select(b.build_float_compare(FloatPredicate::OEQ, x, self.fc(f64::INFINITY), "inf")?, x, y, "y")?
            .into_float_value();
        let y = b
            .build_select(
                b.build_float_compare(FloatPredicate::OEQ, x, self.fc(0.0), "zero")?,
                self.fc(f64::NEG_INFINITY),
                y,
                "y",
            )?
            .into_float_value();
        let bad = b.build_float_compare(FloatPredicate::ULT, x, self.fc(0.0), "bad")?;
        Ok(b.build_select(bad, self.fc(f64::NAN), y, "log")?.into_float_value())
    }

    /// `tanh(x) = sign(x) (1 - e) / (1 + e)`, `e = exp(-2|x|)`.
    fn tanh64(&mut self, x: FloatValue<'ctx>) -> Result<FloatValue<'ctx>, CodegenError> {
        let ax = self.fcall("llvm.fabs", x)?;
        let m2 = self.b.build_float_mul(ax, self.fc(-2.0), "m2")?;
        let e = self.exp64(m2)?;
        let t = self.b.build_float_div(
            self.b.build_float_sub(self.fc(1.0), e, "n")?,
            self.b.build_float_add(self.fc(1.0), e, "d")?,
            "t",
        )?;
        let f = self.intrinsic("llvm.copysign", &[self.ctx.f64_type().into()])?;
        Ok(self.call(f, &[t.into(), x.into()])?.into_float_value())
    }
}
