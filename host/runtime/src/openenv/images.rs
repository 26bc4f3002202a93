//! Images on the wire as PNG data URLs (`data:image/png;base64,…`): what OpenAI-style chat
//! content and browsers read, and lossless, so a client sees the env's exact pixels.

use crate::Image;
use base64::Engine as _;

const PREFIX: &str = "data:image/png;base64,";

/// `image` as a PNG data URL.
pub fn to_data_url(image: &Image) -> String {
    let mut png = Vec::new();
    let encoder = image::codecs::png::PngEncoder::new(&mut png);
    use image::ImageEncoder as _;
    encoder
        .write_image(&image.rgb, image.width, image.height, image::ExtendedColorType::Rgb8)
        .expect("an RGB8 image whose bytes match its size (checked when it came in) encodes");
    format!("{PREFIX}{}", base64::engine::general_purpose::STANDARD.encode(png))
}

/// The image a PNG data URL holds, as RGB8, refused past `max_pixels` before decoding.
pub fn from_data_url(url: &str, max_pixels: u64) -> Result<Image, String> {
    let b64 = url.strip_prefix(PREFIX).ok_or_else(|| {
        let start: String = url.chars().take(32).collect();
        format!("an image is not a PNG data URL (it starts {start:?})")
    })?;
    let png = base64::engine::general_purpose::STANDARD.decode(b64).map_err(|e| format!("an image's base64: {e}"))?;
    let reader = image::ImageReader::with_format(std::io::Cursor::new(&png), image::ImageFormat::Png);
    let (width, height) = reader.into_dimensions().map_err(|e| format!("an image's PNG: {e}"))?;
    if u64::from(width) * u64::from(height) > max_pixels {
        return Err(format!("an image of {width}x{height} pixels is over the {max_pixels} allowed"));
    }
    let decoded = image::load_from_memory_with_format(&png, image::ImageFormat::Png)
        .map_err(|e| format!("an image's PNG: {e}"))?
        .into_rgb8();
    Ok(Image { width, height, rgb: decoded.into_raw() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pixels_survive_the_round_trip_and_bad_urls_are_named() {
        let image = Image { width: 3, height: 2, rgb: (0..18).map(|v| v * 14).collect() };
        let url = to_data_url(&image);
        assert!(url.starts_with(PREFIX));
        assert_eq!(from_data_url(&url, 6).unwrap(), image);
        assert!(from_data_url(&url, 5).unwrap_err().contains("3x2 pixels is over the 5"));
        assert!(from_data_url("http://x/a.png", 100).unwrap_err().contains("not a PNG data URL"));
        assert!(from_data_url("data:image/png;base64,!!", 100).unwrap_err().contains("base64"));
    }
}
