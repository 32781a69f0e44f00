//! `ferrite engines`: which engines exist and which this build contains.

use ferrite::EngineKind;

pub fn print() {
    let built = ferrite::available();
    println!("{:<11} {:<12} what it is", "engine", "in build");
    for k in EngineKind::ALL {
        let here = if built.contains(&k) {
            "yes"
        } else if k == EngineKind::Rask {
            // Always built: a range index with its own API (ferrite_rask),
            // not a key-value store behind the facade.
            "yes (index)"
        } else {
            "no"
        };
        println!("{:<11} {:<12} {}", k.name(), here, k.summary());
    }
}
