// proto-roundtrip IN OUT: the floor onnx-rewrite is measured against. It does
// the least any protobuf-based tool must do: parse the whole ModelProto,
// serialize it to one string, write it. Peak memory is therefore the parsed
// model plus its serialized copy.

#include <onnx/onnx_pb.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: proto-roundtrip IN.onnx OUT.onnx\n");
    return 2;
  }
  const int fd = ::open(argv[1], O_RDONLY);
  if (fd < 0) {
    std::fprintf(stderr, "proto-roundtrip: cannot open %s: %s\n", argv[1], std::strerror(errno));
    return 1;
  }

  onnx::ModelProto model;
  {
    google::protobuf::io::FileInputStream file(fd);
    file.SetCloseOnDelete(true);
    google::protobuf::io::CodedInputStream coded(&file);
    // The default 64 MiB cap would reject any real model.
    coded.SetTotalBytesLimit(std::numeric_limits<int>::max());
    if (!model.ParseFromCodedStream(&coded)) {
      std::fprintf(stderr, "proto-roundtrip: %s is not a valid ModelProto\n", argv[1]);
      return 1;
    }
  }

  std::string bytes;
  if (!model.SerializeToString(&bytes)) {
    std::fprintf(stderr, "proto-roundtrip: serializing failed\n");
    return 1;
  }
  std::ofstream out(argv[2], std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "proto-roundtrip: writing %s failed\n", argv[2]);
    return 1;
  }
  return 0;
}
