fn main() {
    let jit = kiln::jit::Jit::default();
    let reg = kiln::ops::registry::Registry::default();
    let dev = kiln::device::DeviceInfo::h100_sxm();
    let rows = kiln::harness::check::check_all(&jit, &reg, "sm_90a", &dev, |r| {
        println!(
            "{:12} {:60} regs={:?} {:.0}ms {:?}",
            r.version,
            r.variant,
            r.resources.as_ref().map(|x| x.registers),
            r.compile_ms,
            r.problems
        )
    });
    std::process::exit(if rows.iter().all(|r| r.ok()) { 0 } else { 1 });
}
