#include "worker/data/image_decode.h"

#include <jpeglib.h>
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"

namespace trainyard {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return bytes;
}

// libjpeg reports errors through a callback that must not return: it jumps
// back to DecodeJpeg with the message.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void OnJpegError(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void OnJpegWarning(j_common_ptr cinfo, int level) {
  // A corrupt-data warning (level -1) means the image is not what was
  // written: treat it as an error, as a truncated file would be.
  if (level < 0) OnJpegError(cinfo);
}

absl::StatusOr<RgbImage> DecodeJpeg(const std::string& path, const std::string& bytes) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = OnJpegError;
  err.mgr.emit_message = OnJpegWarning;
  RgbImage image;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return absl::DataLossError(absl::StrCat(path, ": not a readable JPEG (", err.message, ")"));
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = JCS_RGB;  // grayscale and YCbCr alike; CMYK is refused below
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    return absl::UnimplementedError(absl::StrCat(path, ": CMYK JPEG images are not supported"));
  }
  jpeg_start_decompress(&cinfo);
  image.height = cinfo.output_height;
  image.width = cinfo.output_width;
  image.pixels.resize(static_cast<size_t>(image.height * image.width * 3));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = image.pixels.data() + static_cast<size_t>(cinfo.output_scanline) * image.width * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return image;
}

struct PngReader {
  const std::string* bytes;
  size_t offset = 0;
};

void ReadPngBytes(png_structp png, png_bytep out, png_size_t length) {
  auto* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (r->offset + length > r->bytes->size()) png_error(png, "the file ends early");
  std::memcpy(out, r->bytes->data() + r->offset, length);
  r->offset += length;
}

void OnPngError(png_structp png, png_const_charp message) {
  auto* text = static_cast<std::string*>(png_get_error_ptr(png));
  *text = message;
  png_longjmp(png, 1);
}

void OnPngWarning(png_structp, png_const_charp) {}

absl::StatusOr<RgbImage> DecodePng(const std::string& path, const std::string& bytes) {
  std::string message;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &message, OnPngError, OnPngWarning);
  if (png == nullptr) return absl::ResourceExhaustedError("libpng: out of memory");
  png_infop info = png_create_info_struct(png);
  RgbImage image;
  std::vector<png_bytep> rows;
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return absl::DataLossError(absl::StrCat(path, ": not a readable PNG (", message, ")"));
  }
  PngReader reader{&bytes};
  png_set_read_fn(png, &reader, ReadPngBytes);
  png_read_info(png, info);
  const png_byte color = png_get_color_type(png, info);
  if (png_get_bit_depth(png, info) == 16) png_set_strip_16(png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  // PIL's convert("RGB") drops alpha and transparency without blending.
  if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  image.height = png_get_image_height(png, info);
  image.width = png_get_image_width(png, info);
  if (png_get_rowbytes(png, info) != static_cast<png_size_t>(image.width * 3)) {
    png_error(png, "unexpected row layout after conversion to RGB");
  }
  image.pixels.resize(static_cast<size_t>(image.height * image.width * 3));
  rows.resize(static_cast<size_t>(image.height));
  for (int64_t y = 0; y < image.height; ++y) rows[y] = image.pixels.data() + y * image.width * 3;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return image;
}

}  // namespace

absl::StatusOr<RgbImage> DecodeImageFile(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  const auto* b = reinterpret_cast<const unsigned char*>(bytes->data());
  if (bytes->size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return DecodeJpeg(path, *bytes);
  if (bytes->size() >= 8 && png_sig_cmp(b, 0, 8) == 0) return DecodePng(path, *bytes);
  return absl::InvalidArgumentError(absl::StrCat(path, ": neither a JPEG nor a PNG file"));
}

}  // namespace trainyard
