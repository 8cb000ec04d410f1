//! The page's own files, compiled into the daemon: it needs nothing from
//! any other server (no CDN, no remote font), and it works offline.

/// A file the page loads.
#[derive(Debug)]
pub struct Asset {
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// Its bytes.
    pub bytes: &'static [u8],
}

/// Every asset, by path: all of what the page loads besides its HTML.
pub const ALL: &[(&str, Asset)] = &[
    (
        "/assets/app.css",
        Asset {
            content_type: "text/css; charset=utf-8",
            bytes: include_bytes!("../../assets/app.css"),
        },
    ),
    (
        "/assets/app.js",
        Asset {
            content_type: "text/javascript; charset=utf-8",
            bytes: include_bytes!("../../assets/app.js"),
        },
    ),
    (
        "/assets/icon.svg",
        Asset {
            content_type: "image/svg+xml",
            bytes: include_bytes!("../../assets/icon.svg"),
        },
    ),
];

/// The asset at `path`, if there is one.
pub fn get(path: &str) -> Option<&'static Asset> {
    ALL.iter().find(|(p, _)| *p == path).map(|(_, a)| a)
}
