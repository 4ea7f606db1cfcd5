/* How the replicas of a shared GPU share it: one name for the config (its
 * sharing section), the plugin's assignment and the device record, which
 * labels, metrics and the status socket read. */
#ifndef GPULET_SHARING_H
#define GPULET_SHARING_H

enum gpu_sharing { GPU_SHARING_NONE, GPU_SHARING_TIME_SLICING, GPU_SHARING_MPS };

/* Each one's name in labels and messages: "none", "time-slicing", "mps". */
extern const char *const gpu_sharing_names[];

#endif
