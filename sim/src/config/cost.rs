//! The `cost` section: the roofline prior, a profile and inline coefficients.

use super::*;

pub(super) fn resolve_cost(
    c: &CostSection,
    model: &ModelCard,
    gpu: &GpuCard,
    dep: &Deployment,
    res: &Resources,
) -> Result<CostModel> {
    let prior = c.prior.clone().unwrap_or_default();
    for (name, v) in [
        ("prefill_mfu", prior.prefill_mfu),
        ("decode_mfu", prior.decode_mfu),
        ("attention_mfu", prior.attention_mfu),
        ("weight_bandwidth_eff", prior.weight_bandwidth_eff),
        ("kv_bandwidth_eff", prior.kv_bandwidth_eff),
        ("interconnect_bandwidth_eff", prior.interconnect_bandwidth_eff),
    ] {
        if !(v > 0.0 && v <= 1.0) {
            return Err(ConfigError::new(
                format!("cost.prior.{name}"),
                format!("an efficiency must be in (0, 1], got {v}"),
            ));
        }
    }
    if !(prior.allreduce_latency_us.is_finite() && prior.allreduce_latency_us >= 0.0) {
        return Err(ConfigError::new(
            "cost.prior.allreduce_latency_us",
            format!("must be a finite number >= 0 (µs), got {}", prior.allreduce_latency_us),
        ));
    }
    let mut cost = CostModel::roofline(model, gpu, dep, &prior);
    if c.profile.is_some() {
        let p = res.profile.as_ref().ok_or_else(|| ConfigError::new("cost.profile", "the profile was not loaded"))?;
        check_coefficients(p, "cost.profile")?;
        cost.overlay(p, CoefficientSource::Profile);
    }
    if let Some(co) = &c.coefficients {
        check_coefficients(co, "cost.coefficients")?;
        cost.overlay(co, CoefficientSource::Scenario);
    }
    Ok(cost)
}

fn check_coefficients(c: &CostCoefficients, path: &str) -> Result<()> {
    for name in COEFFICIENT_NAMES {
        if let Some(v) = c.get(name) {
            if !(v.is_finite() && v >= 0.0) {
                return Err(ConfigError::new(
                    format!("{path}.{name}"),
                    format!("must be a finite number >= 0 (µs), got {v}"),
                ));
            }
        }
    }
    Ok(())
}
