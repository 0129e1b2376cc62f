//! A template text as the audit series carries it, from anywhere: parsing never panics, a
//! parsed template's rendering parses back to the same template, and reconstructing with any
//! parameters either refuses or yields a line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ourios_miner::Template;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(template) = Template::parse(&text) else {
        return;
    };
    let rendered = template.to_string();
    assert_eq!(
        Template::parse(&rendered).as_ref(),
        Ok(&template),
        "a rendering parses back to its template"
    );
    let params: Vec<&str> = text.split(' ').collect();
    let _ = template.reconstruct(&params);
});
