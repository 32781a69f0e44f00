//! `ferrite engines`: which engines exist and which this build contains.

use ferrite::EngineKind;

pub fn print() {
    let built = ferrite::available();
    println!("{:<11} {:<10} what it is", "engine", "in build");
    for k in EngineKind::ALL {
        let here = if built.contains(&k) { "yes" } else { "no" };
        println!("{:<11} {:<10} {}", k.name(), here, k.summary());
    }
}
