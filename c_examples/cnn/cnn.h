/*
 * cnn: a Fashion-MNIST image classifier trained with arenagrad (a small
 * convolutional network, with batch normalisation on request). Units:
 *
 *   data.c   IDX files read through zlib (gzip or plain), checked, and the
 *            pixels normalised with the training set's mean and deviation
 *   model.c  the network's parameters, their initialisation and forward pass
 *   main.c   flags, the training loop, evaluation, checkpoints and --resume
 *
 * The helpers shared with the other trainers are in ../common/trainer.h.
 */
#ifndef CNN_H
#define CNN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arenagrad.h"

#define IMG_SIDE 28
#define IMG_PIXELS (IMG_SIDE * IMG_SIDE)
#define N_CLASSES 10

/* One split of the data set: n images of IMG_PIXELS floats and n labels. */
struct dataset {
    size_t n;
    float *images;  /* normalised pixels, row-major, image after image */
    int32_t *labels; /* each in [0, N_CLASSES) */
};

/* Reads the images and labels IDX files (gzip-compressed or not) into `d`,
 * keeping at most `limit` images (0: all). Pixels are scaled to [0, 1] but
 * not normalised. False with a message in err (wrong magic, wrong
 * dimensions, truncated file, a label out of range, counts that differ). */
bool dataset_load(struct dataset *d, const char *images_path, const char *labels_path,
                  size_t limit, char *err, size_t errlen);
/* The mean and standard deviation of every pixel of `d`. */
void dataset_stats(const struct dataset *d, float *mean, float *std);
/* Maps every pixel p to (p - mean) / std. */
void dataset_normalise(struct dataset *d, float mean, float std);
void dataset_free(struct dataset *d);

/* The network: conv(1->C1, 3x3) relu conv(C1->C1) relu maxpool2,
 * conv(C1->C2) relu maxpool2, fc(C2*7*7 -> H) relu dropout, fc(H -> 10);
 * with batch_norm, a batch norm between each conv and its relu. */
struct model_dims {
    size_t c1, c2, hidden;
    float dropout;
    bool batch_norm;
};

struct model {
    struct model_dims dims;
    ag_tensor conv1_w, conv1_b, conv2_w, conv2_b, conv3_w, conv3_b;
    ag_tensor fc1_w, fc1_b, fc2_w, fc2_b;
    /* With batch_norm: each conv's batch norm weight, bias and running
     * statistics (bn1..bn3). */
    ag_tensor bn_w[3], bn_b[3];
    uint32_t bn_stats[3];
};

/* Creates the parameters (PyTorch's default uniform initialisation, drawn
 * from `seed`). Call before the optimizer. */
ag_status model_create(ag_context *ctx, struct model *m, const struct model_dims *dims,
                       uint64_t seed);
/* Logits [batch, N_CLASSES] of `images` (batch x IMG_PIXELS floats);
 * dropout (when training and dims.dropout > 0) draws its mask from
 * `dropout_seed`. Sets the context's training mode to `training`: batch
 * norm then uses and updates batch statistics, else its running ones. */
ag_status model_forward(ag_context *ctx, const struct model *m, const float *images,
                        size_t batch, bool training, uint64_t dropout_seed, ag_tensor *logits);

#endif /* CNN_H */
