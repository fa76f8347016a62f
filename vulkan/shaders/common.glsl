// common.glsl — shared by every kernel: 2-D workgroup numbering (a dimension holds at most 65535
// groups on many devices) and the ggml type ids the typed kernels are compiled for.
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require

#define GGML_F32 0
#define GGML_F16 1
#define GGML_Q4_0 2
#define GGML_Q4_1 3
#define GGML_Q5_0 6
#define GGML_Q5_1 7
#define GGML_Q8_0 8
#define GGML_Q2_K 10
#define GGML_Q3_K 11
#define GGML_Q4_K 12
#define GGML_Q5_K 13
#define GGML_Q6_K 14
#define GGML_IQ4_NL 20
#define GGML_IQ4_XS 23
#define GGML_BF16 30

// The flat index of this workgroup when the host spreads n groups over x and y.
uint flat_group_id() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }
