// text-to-onnx IN.onnxtxt OUT.onnx: writes the model an ONNX textual-syntax file describes.
// testdata/ models are generated with it, so that each has a readable source in the repo.
#include <fstream>
#include <iostream>
#include <sstream>

#include <onnx/defs/parser.h>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: text-to-onnx IN.onnxtxt OUT.onnx\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::cerr << "text-to-onnx: error: " << argv[1] << ": cannot read\n";
    return 3;
  }
  std::stringstream text;
  text << in.rdbuf();
  onnx::ModelProto model;
  const auto status = onnx::OnnxParser::Parse(model, text.str().c_str());
  if (!status.IsOK()) {
    std::cerr << "text-to-onnx: error: " << argv[1] << ": " << status.ErrorMessage() << "\n";
    return 3;
  }
  std::ofstream out(argv[2], std::ios::binary);
  if (!model.SerializeToOstream(&out)) {
    std::cerr << "text-to-onnx: error: " << argv[2] << ": cannot write\n";
    return 3;
  }
  return 0;
}
