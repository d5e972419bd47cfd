// The one translation unit that compiles stb_image (Debian libstb-dev), restricted to the formats
// phi4mm decodes with it: PNG, BMP, GIF and PNM (JPEG goes through libjpeg-turbo, image_jpeg.cc).
// Everything else stb could read (PSD, TGA, HDR, PIC) is compiled out so that it is rejected by name
// instead (see image.cc).
#define STB_IMAGE_IMPLEMENTATION
#define STBI_NO_JPEG
#define STBI_NO_PSD
#define STBI_NO_TGA
#define STBI_NO_HDR
#define STBI_NO_PIC
#define STBI_NO_LINEAR
#define STBI_NO_STDIO
#define STBI_MAX_DIMENSIONS (1 << 20)
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#endif
#include <stb/stb_image.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
