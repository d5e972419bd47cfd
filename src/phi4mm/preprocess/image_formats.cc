// Container inspection for the image decoder (image_formats.h): format sniffing, structural walks
// and the declared size of PNG, JPEG, GIF, BMP, PNM and WebP files, with errors that say what was
// found and what to do.
#include "phi4mm/preprocess/image_formats.h"

#include <array>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <string_view>

namespace phi4mm::image_internal {
namespace {

using namespace std::string_view_literals;
using Bytes = std::span<const uint8_t>;

bool StartsWith(Bytes b, std::string_view magic, size_t offset = 0) {
  return b.size() >= offset + magic.size() && std::memcmp(b.data() + offset, magic.data(), magic.size()) == 0;
}
std::string Hex(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%02X", v & 0xFFu);
  return buf;
}
uint32_t Be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}
uint16_t Be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
uint32_t Le32(const uint8_t* p) {
  return (uint32_t{p[3]} << 24) | (uint32_t{p[2]} << 16) | (uint32_t{p[1]} << 8) | p[0];
}
uint16_t Le16(const uint8_t* p) { return static_cast<uint16_t>((p[1] << 8) | p[0]); }

Status Truncated(const std::string& label, const std::string& format, const std::string& detail) {
  return DataLoss(label + ": the " + format + " file is truncated or corrupt (" + detail +
                  "); re-export or re-download it");
}
Status NotSupported(const std::string& label, const std::string& what) {
  return Unsupported(label + ": " + what + " is not supported; convert it to PNG or JPEG");
}

uint32_t Crc32(const uint8_t* p, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

// PNG: 8-byte signature, then chunks [length u32be][type 4][data][crc u32be] up to IEND. IHDR
// first: width, height, bit depth, colour type. Pillow checks the CRCs; so do we.
Result<FormatInfo> InspectPng(Bytes b, const std::string& label) {
  FormatInfo info;
  info.format = Format::kPng;
  size_t pos = 8;
  bool first = true, seen_idat = false;
  while (true) {
    if (pos + 8 > b.size()) {
      return Truncated(label, "PNG", seen_idat ? "it ends before the IEND chunk" : "it ends before the image data");
    }
    const uint32_t len = Be32(b.data() + pos);
    std::string type(reinterpret_cast<const char*>(b.data() + pos + 4), 4);
    for (char& c : type) {
      if (!std::isalpha(static_cast<unsigned char>(c))) c = '?';
    }
    if (len > 0x7FFFFFFFu || pos + 12 + len > b.size()) {
      return Truncated(label, "PNG", "chunk '" + type + "' at byte " + std::to_string(pos) +
                                         " runs past the end of the file");
    }
    const uint8_t* data = b.data() + pos + 8;
    if (Crc32(b.data() + pos + 4, len + 4) != Be32(data + len)) {
      return DataLoss(label + ": the PNG file is corrupt (CRC mismatch in chunk '" + type + "' at byte " +
                      std::to_string(pos) + ")");
    }
    if (first) {
      if (type != "IHDR" || len != 13) return DataLoss(label + ": the PNG file is corrupt (no IHDR chunk first)");
      info.width = Be32(data);
      info.height = Be32(data + 4);
      const int depth = data[8], color = data[9];
      if (color == 0 && depth == 16) info.png_gray16 = true;
      first = false;
    }
    if (type == "IDAT") seen_idat = true;
    if (type == "IEND") break;
    pos += 12 + len;
  }
  if (!seen_idat) return DataLoss(label + ": the PNG file is corrupt (no IDAT chunk)");
  return info;
}

// JPEG: markers FF xx; segments carry a big-endian length; after SOS the entropy-coded data runs to
// the next marker that is not FF00 or a restart marker. A complete file reaches EOI (FF D9).
Result<FormatInfo> InspectJpeg(Bytes b, const std::string& label) {
  FormatInfo info;
  info.format = Format::kJpeg;
  size_t pos = 2;
  bool seen_sof = false, progressive = false;
  unsigned defined_tables = 0;  // bit class*4 + id for each Huffman table defined so far
  while (true) {
    while (pos < b.size() && b[pos] != 0xFF) ++pos;  // tolerate junk between segments like libjpeg
    while (pos < b.size() && b[pos] == 0xFF) ++pos;
    if (pos >= b.size()) return Truncated(label, "JPEG", "it ends before the end-of-image marker");
    const uint8_t marker = b[pos++];
    if (marker == 0xD9) break;
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) continue;
    if (pos + 2 > b.size()) return Truncated(label, "JPEG", "it ends inside a marker");
    const size_t len = Be16(b.data() + pos);
    if (len < 2 || pos + len > b.size()) {
      return Truncated(label, "JPEG", "segment FF" + Hex(marker) + " at byte " + std::to_string(pos - 2) +
                                          " runs past the end of the file");
    }
    if (marker == 0xC4) {
      // DHT: [class/id][16 code-length counts][symbols]... Each table holds at most 256 symbols;
      // stb_image 2.27 writes past its tables when the counts add up to more, so refuse it here.
      size_t q = pos + 2;
      while (q < pos + len) {
        if ((b[q] >> 4) <= 1) defined_tables |= 1u << ((b[q] >> 4) * 4 + (b[q] & 3));
        if (q + 17 > pos + len) return DataLoss(label + ": the JPEG file is corrupt (bad Huffman table)");
        // Code lengths 1..16 must fit a prefix code (Kraft: sum count_l * 2^(16-l) <= 2^16).
        size_t n = 0;
        uint64_t kraft = 0;
        for (int i = 0; i < 16; ++i) {
          n += b[q + 1 + i];
          kraft += uint64_t{b[q + 1 + i]} << (15 - i);
        }
        if ((b[q] >> 4) > 1 || (b[q] & 15) > 3 || n > 256 || kraft > (uint64_t{1} << 16) || q + 17 + n > pos + len) {
          return DataLoss(label + ": the JPEG file is corrupt (bad Huffman table)");
        }
        q += 17 + n;
      }
    }
    const bool sof = (marker >= 0xC0 && marker <= 0xCF) && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (sof) {
      if (len < 8) return DataLoss(label + ": the JPEG file is corrupt (short frame header)");
      if (marker >= 0xC9) return NotSupported(label, "an arithmetic-coded JPEG");
      if (marker == 0xC3 || marker == 0xC7) return NotSupported(label, "a lossless JPEG");
      if (marker == 0xC5 || marker == 0xC6) return NotSupported(label, "a hierarchical JPEG");
      const int precision = b[pos + 2];
      info.height = Be16(b.data() + pos + 3);
      info.width = Be16(b.data() + pos + 5);
      const int components = b[pos + 7];
      if (precision != 8) return NotSupported(label, "a " + std::to_string(precision) + "-bit JPEG");
      if (components == 4) return NotSupported(label, "a CMYK/YCCK JPEG (4 colour components)");
      if (components != 1 && components != 3) {
        return NotSupported(label, "a JPEG with " + std::to_string(components) + " colour components");
      }
      if (info.height == 0) return NotSupported(label, "a JPEG whose height is given by a DNL marker");
      seen_sof = true;
      progressive = marker == 0xC2;
    }
    if (marker == 0xDA && len >= 3 && len >= 6 + 2 * size_t{b[pos + 2]}) {
      // SOS: [Ns][Cs, Td<<4|Ta]*Ns[Ss][Se][Ah<<4|Al]. stb_image 2.27 reads undefined Huffman tables
      // from uninitialised memory, so a scan must only use tables the file defined (libjpeg-turbo
      // would substitute the standard tables; such files are Motion-JPEG frames).
      const size_t ns = b[pos + 2];
      const uint8_t ss = b[pos + 3 + 2 * ns], ah = b[pos + 5 + 2 * ns] >> 4;
      const bool needs_dc = !progressive || (ss == 0 && ah == 0);
      const bool needs_ac = !progressive || ss > 0;
      for (size_t i = 0; i < ns; ++i) {
        const uint8_t tables = b[pos + 4 + 2 * i];
        if ((needs_dc && !(defined_tables & (1u << ((tables >> 4) & 3)))) ||
            (needs_ac && !(defined_tables & (1u << (4 + (tables & 3)))))) {
          return NotSupported(label, "a JPEG scan that uses a Huffman table the file does not define (Motion-JPEG)");
        }
      }
    }
    pos += len;
    if (marker == 0xDA) {  // SOS: skip entropy-coded data
      if (!seen_sof) return DataLoss(label + ": the JPEG file is corrupt (scan before the frame header)");
      while (pos + 1 < b.size()) {
        if (b[pos] == 0xFF && b[pos + 1] != 0x00 && !(b[pos + 1] >= 0xD0 && b[pos + 1] <= 0xD7) && b[pos + 1] != 0xFF) break;
        ++pos;
      }
      if (pos + 1 >= b.size()) return Truncated(label, "JPEG", "it ends inside the image data");
    }
  }
  if (!seen_sof) return DataLoss(label + ": the JPEG file is corrupt (no frame header)");
  return info;
}

// GIF: header, logical screen descriptor, optional global colour table, then extension blocks and
// the first image descriptor with its LZW sub-blocks; only the first frame is used.
Result<FormatInfo> InspectGif(Bytes b, const std::string& label) {
  FormatInfo info;
  info.format = Format::kGif;
  if (b.size() < 13) return Truncated(label, "GIF", "it ends inside the header");
  info.width = Le16(b.data() + 6);
  info.height = Le16(b.data() + 8);
  size_t pos = 13;
  size_t palette = 0, palette_entries = 0;
  if (b[10] & 0x80) {
    palette = pos;
    palette_entries = size_t{1} << ((b[10] & 7) + 1);
    pos += 3 * palette_entries;
  }
  int transparent = -1;
  auto skip_sub_blocks = [&]() -> bool {
    while (pos < b.size()) {
      const size_t n = b[pos++];
      if (n == 0) return true;
      pos += n;
    }
    return false;
  };
  while (true) {
    if (pos >= b.size()) return Truncated(label, "GIF", "it ends before the first image");
    const uint8_t block = b[pos++];
    if (block == 0x21) {
      if (pos >= b.size()) return Truncated(label, "GIF", "it ends inside an extension");
      // Graphic control extension: [F9][04][flags][delay u16][transparent index][00].
      if (b[pos] == 0xF9 && pos + 5 < b.size() && b[pos + 1] == 4) {
        transparent = (b[pos + 2] & 1) ? b[pos + 5] : -1;
      }
      ++pos;
      if (!skip_sub_blocks()) return Truncated(label, "GIF", "it ends inside an extension");
    } else if (block == 0x2C) {
      if (pos + 9 > b.size()) return Truncated(label, "GIF", "it ends inside the image descriptor");
      const uint8_t flags = b[pos + 8];
      pos += 9;
      if (flags & 0x80) {
        palette = pos;
        palette_entries = size_t{1} << ((flags & 7) + 1);
        pos += 3 * palette_entries;
      }
      ++pos;  // LZW minimum code size
      if (pos > b.size() || !skip_sub_blocks()) return Truncated(label, "GIF", "it ends inside the first image's data");
      if (transparent >= 0) {
        info.gif_transparency = true;
        if (static_cast<size_t>(transparent) < palette_entries) {
          for (int c = 0; c < 3; ++c) info.gif_transparent_rgb[c] = b[palette + 3 * static_cast<size_t>(transparent) + c];
        }
      }
      return info;
    } else if (block == 0x3B) {
      return DataLoss(label + ": the GIF file holds no image");
    } else {
      return DataLoss(label + ": the GIF file is corrupt (unknown block 0x" + Hex(block) + ")");
    }
  }
}

// BMP: BITMAPFILEHEADER (pixel data offset at 10), then a DIB header whose size tells its version.
Result<FormatInfo> InspectBmp(Bytes b, const std::string& label) {
  FormatInfo info;
  info.format = Format::kBmp;
  if (b.size() < 26) return Truncated(label, "BMP", "it ends inside the header");
  const uint32_t offset = Le32(b.data() + 10);
  const uint32_t dib = Le32(b.data() + 14);
  int64_t w = 0, h = 0;
  int bpp = 0;
  uint32_t compression = 0;
  if (dib == 12) {
    w = Le16(b.data() + 18);
    h = Le16(b.data() + 20);
    bpp = Le16(b.data() + 24);
  } else if (dib >= 40) {
    if (b.size() < 14 + 40) return Truncated(label, "BMP", "it ends inside the header");
    w = static_cast<int32_t>(Le32(b.data() + 18));
    h = static_cast<int32_t>(Le32(b.data() + 22));
    bpp = Le16(b.data() + 28);
    compression = Le32(b.data() + 30);
  } else {
    return DataLoss(label + ": the BMP file is corrupt (DIB header of " + std::to_string(dib) + " bytes)");
  }
  if (h < 0) h = -h;
  if (compression == 1 || compression == 2) return NotSupported(label, "an RLE-compressed BMP");
  if (compression == 4 || compression == 5) return NotSupported(label, "a BMP wrapping JPEG/PNG data");
  if (compression != 0 && compression != 3 && compression != 6) {
    return NotSupported(label, "a BMP with compression type " + std::to_string(compression));
  }
  if (bpp != 1 && bpp != 4 && bpp != 8 && bpp != 16 && bpp != 24 && bpp != 32) {
    return DataLoss(label + ": the BMP file is corrupt (" + std::to_string(bpp) + " bits per pixel)");
  }
  info.width = w;
  info.height = h;
  if (w > 0 && h > 0) {
    const uint64_t stride = ((static_cast<uint64_t>(w) * static_cast<uint64_t>(bpp) + 31) / 32) * 4;
    info.min_bytes = uint64_t{offset} + stride * static_cast<uint64_t>(h);
  }
  return info;
}

// Binary PGM (P5) / PPM (P6): magic, width, height, maxval as ASCII integers separated by
// whitespace or comments, one whitespace byte, then the samples.
Result<FormatInfo> InspectPnm(Bytes b, const std::string& label) {
  FormatInfo info;
  info.format = Format::kPnm;
  const char kind = static_cast<char>(b[1]);
  if (kind == '1' || kind == '4') return NotSupported(label, "a PBM (1-bit) image");
  if (kind == '2' || kind == '3') return NotSupported(label, "an ASCII (plain) PGM/PPM image");
  if (kind == '7') return NotSupported(label, "a PAM image");
  size_t pos = 2;
  int64_t values[3] = {0, 0, 0};
  for (int64_t& v : values) {
    while (pos < b.size() && (std::isspace(b[pos]) || b[pos] == '#')) {
      if (b[pos] == '#') {
        while (pos < b.size() && b[pos] != '\n' && b[pos] != '\r') ++pos;
      } else {
        ++pos;
      }
    }
    if (pos >= b.size() || !std::isdigit(b[pos])) return Truncated(label, "PPM/PGM", "bad or incomplete header");
    while (pos < b.size() && std::isdigit(b[pos])) {
      v = v * 10 + (b[pos++] - '0');
      if (v > (int64_t{1} << 40)) return DataLoss(label + ": the PPM/PGM header holds an absurd number");
    }
  }
  ++pos;  // the single whitespace byte before the samples
  info.width = values[0];
  info.height = values[1];
  if (values[2] != 255) {
    return NotSupported(label, "a PPM/PGM with maxval " + std::to_string(values[2]) + " (only 8-bit, maxval 255)");
  }
  if (info.width > 0 && info.height > 0) {
    info.min_bytes = pos + static_cast<uint64_t>(info.width) * static_cast<uint64_t>(info.height) * (kind == '6' ? 3 : 1);
  }
  return info;
}

}  // namespace

Result<FormatInfo> InspectImage(Bytes b, const std::string& label) {
  if (StartsWith(b, "\x89PNG\r\n\x1a\n"sv)) return InspectPng(b, label);
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return InspectJpeg(b, label);
  if (StartsWith(b, "GIF87a") || StartsWith(b, "GIF89a")) return InspectGif(b, label);
  if (StartsWith(b, "BM")) return InspectBmp(b, label);
  if (b.size() >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '7' && (b.size() == 2 || std::isspace(b[2]))) {
    return InspectPnm(b, label);
  }
  if (StartsWith(b, "RIFF") && StartsWith(b, "WEBP", 8)) {
    if (b.size() < 12 || uint64_t{Le32(b.data() + 4)} + 8 > b.size()) {
      return Truncated(label, "WebP", "the RIFF header declares more bytes than the file holds");
    }
    FormatInfo info;
    info.format = Format::kWebp;
    return info;
  }
  if (StartsWith(b, "II*") || StartsWith(b, "MM\0*"sv)) return NotSupported(label, "TIFF");
  if (StartsWith(b, "ftyp", 4)) {
    if (StartsWith(b, "avif", 8) || StartsWith(b, "avis", 8)) return NotSupported(label, "AVIF");
    if (StartsWith(b, "heic", 8) || StartsWith(b, "heix", 8) || StartsWith(b, "mif1", 8) || StartsWith(b, "msf1", 8)) {
      return NotSupported(label, "HEIF/HEIC");
    }
    if (StartsWith(b, "jp2 ", 8)) return NotSupported(label, "JPEG 2000");
  }
  if (StartsWith(b, "\0\0\0\x0cjP  \r\n\x87\n"sv) || StartsWith(b, "\xff\x4f\xff\x51")) return NotSupported(label, "JPEG 2000");
  if (StartsWith(b, "\xff\x0a") || StartsWith(b, "\0\0\0\x0cJXL "sv)) return NotSupported(label, "JPEG XL");
  if (StartsWith(b, "8BPS")) return NotSupported(label, "Photoshop PSD");
  if (StartsWith(b, "qoif")) return NotSupported(label, "QOI");
  if (StartsWith(b, "DDS ")) return NotSupported(label, "DDS");
  if (StartsWith(b, "\x76\x2f\x31\x01")) return NotSupported(label, "OpenEXR");
  if (StartsWith(b, "%PDF")) return NotSupported(label, "a PDF document");
  if (StartsWith(b, "<?xml") || StartsWith(b, "<svg")) return NotSupported(label, "SVG/XML");
  if (StartsWith(b, "\0\0\1\0"sv)) return NotSupported(label, "ICO");
  char head[64];
  std::snprintf(head, sizeof head, "%02x %02x %02x %02x", b.size() > 0 ? b[0] : 0, b.size() > 1 ? b[1] : 0,
                b.size() > 2 ? b[2] : 0, b.size() > 3 ? b[3] : 0);
  return Unsupported(label + ": not a recognised image format (first bytes " + head +
                     "); phi4mm reads JPEG, PNG, BMP, GIF, PPM/PGM and WebP");
}

}  // namespace phi4mm::image_internal
