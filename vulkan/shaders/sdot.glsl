// sdot.glsl — OpSDot (SPV_KHR_integer_dot_product, needs the device's shaderIntegerDotProduct),
// declared through GL_EXT_spirv_intrinsics since Debian's glslc has no GL_EXT_integer_dot_product:
// sdot4(a, b, 0) is the sum of the 4 products of two words of 4 packed int8.
#extension GL_EXT_spirv_intrinsics : require

spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4(uint a, uint b, spirv_literal int packed_4x8bit);

const uint ONES = 0x01010101u;   // four int8 ones
