/*
 * model.c: the convolutional network. Weights use PyTorch's default
 * initialisation for conv and linear layers, U(-1/sqrt(fan_in),
 * 1/sqrt(fan_in)) for weights and biases alike, so results are comparable.
 */
#include <math.h>
#include <stdio.h>

#include "cnn.h"

#define TRY(call)                                                                                  \
    do {                                                                                           \
        ag_status st_ = (call);                                                                    \
        if (st_ != AG_STATUS_OK) return st_;                                                       \
    } while (0)

/* A parameter of `shape` drawn from U(-1/sqrt(fan_in), 1/sqrt(fan_in)). */
static ag_status uniform_param(ag_context *ctx, const char *name, const size_t *shape,
                               size_t ndim, size_t fan_in, uint64_t seed, ag_tensor *out)
{
    TRY(ag_param_new_named(ctx, name, shape, ndim, NULL, out));
    const float bound = (float)(1.0 / sqrt((double)fan_in));
    return ag_param_init(ctx, *out, AG_INIT_UNIFORM, -bound, bound, seed);
}

/* A conv layer's weight [c_out, c_in, 3, 3] and bias [c_out]. */
static ag_status conv_params(ag_context *ctx, const char *wname, const char *bname, size_t c_in,
                             size_t c_out, uint64_t seed, ag_tensor *w, ag_tensor *b)
{
    const size_t wshape[4] = {c_out, c_in, 3, 3}, bshape[1] = {c_out};
    TRY(uniform_param(ctx, wname, wshape, 4, c_in * 9, seed, w));
    return uniform_param(ctx, bname, bshape, 1, c_in * 9, seed + 1, b);
}

/* A linear layer's weight [in, out] (x @ w) and bias [out]. */
static ag_status fc_params(ag_context *ctx, const char *wname, const char *bname, size_t in,
                           size_t out, uint64_t seed, ag_tensor *w, ag_tensor *b)
{
    const size_t wshape[2] = {in, out}, bshape[1] = {out};
    TRY(uniform_param(ctx, wname, wshape, 2, in, seed, w));
    return uniform_param(ctx, bname, bshape, 1, in, seed + 1, b);
}

/* Batch norm `i` (bn1..bn3) over c channels: weight 1, bias 0 (PyTorch's
 * defaults) and its running statistics. */
static ag_status batch_norm_params(ag_context *ctx, struct model *m, int i, size_t c)
{
    char w[32], b[32], prefix[16];
    snprintf(w, sizeof w, "bn%d.weight", i + 1);
    snprintf(b, sizeof b, "bn%d.bias", i + 1);
    snprintf(prefix, sizeof prefix, "bn%d", i + 1);
    const size_t shape[1] = {c};
    TRY(ag_param_new_named(ctx, w, shape, 1, NULL, &m->bn_w[i]));
    TRY(ag_param_init(ctx, m->bn_w[i], AG_INIT_ONES, 0.0f, 0.0f, 0));
    TRY(ag_param_new_named(ctx, b, shape, 1, NULL, &m->bn_b[i]));
    return ag_batch_norm_stats_new(ctx, prefix, c, &m->bn_stats[i]);
}

ag_status model_create(ag_context *ctx, struct model *m, const struct model_dims *dims,
                       uint64_t seed)
{
    m->dims = *dims;
    if (dims->batch_norm) {
        const size_t channels[3] = {dims->c1, dims->c1, dims->c2};
        for (int i = 0; i < 3; i++) TRY(batch_norm_params(ctx, m, i, channels[i]));
    }
    const size_t flat = dims->c2 * (IMG_SIDE / 4) * (IMG_SIDE / 4);
    /* Seeds two apart: each layer's weight and bias draw their own streams. */
    TRY(conv_params(ctx, "conv1.weight", "conv1.bias", 1, dims->c1, seed, &m->conv1_w,
                    &m->conv1_b));
    TRY(conv_params(ctx, "conv2.weight", "conv2.bias", dims->c1, dims->c1, seed + 2,
                    &m->conv2_w, &m->conv2_b));
    TRY(conv_params(ctx, "conv3.weight", "conv3.bias", dims->c1, dims->c2, seed + 4,
                    &m->conv3_w, &m->conv3_b));
    TRY(fc_params(ctx, "fc1.weight", "fc1.bias", flat, dims->hidden, seed + 6, &m->fc1_w,
                  &m->fc1_b));
    return fc_params(ctx, "fc2.weight", "fc2.bias", dims->hidden, N_CLASSES, seed + 8,
                     &m->fc2_w, &m->fc2_b);
}

/* conv 3x3, stride 1, padding 1 (same size), batch norm `bn` when the
 * model has them, then ReLU. Without batch norm the conv and its ReLU are
 * one op: the same numbers, one pass less over the activations. */
static ag_status conv_relu(ag_context *ctx, const struct model *m, int bn, ag_tensor x,
                           ag_tensor w, ag_tensor b, ag_tensor *out)
{
    if (!m->dims.batch_norm) return ag_conv2d_relu(ctx, x, w, &b, 1, 1, 1, 1, 1, 1, 1, out);
    ag_tensor y;
    TRY(ag_conv2d(ctx, x, w, &b, 1, 1, 1, 1, 1, 1, 1, &y));
    TRY(ag_batch_norm(ctx, y, m->bn_w[bn], m->bn_b[bn], m->bn_stats[bn], 0.1f, 1e-5f, &y));
    return ag_relu(ctx, y, out);
}

static ag_status max_pool2(ag_context *ctx, ag_tensor x, ag_tensor *out)
{
    return ag_max_pool2d(ctx, x, 2, 2, 2, 2, 0, 0, false, out);
}

ag_status model_forward(ag_context *ctx, const struct model *m, const float *images,
                        size_t batch, bool training, uint64_t dropout_seed, ag_tensor *logits)
{
    const struct model_dims *d = &m->dims;
    const size_t in_shape[4] = {batch, 1, IMG_SIDE, IMG_SIDE};
    ag_tensor x, h;
    TRY(ag_set_training(ctx, training));
    TRY(ag_tensor_new(ctx, in_shape, 4, images, &x));
    TRY(conv_relu(ctx, m, 0, x, m->conv1_w, m->conv1_b, &h));
    TRY(conv_relu(ctx, m, 1, h, m->conv2_w, m->conv2_b, &h));
    TRY(max_pool2(ctx, h, &h)); /* [B, c1, 14, 14] */
    TRY(conv_relu(ctx, m, 2, h, m->conv3_w, m->conv3_b, &h));
    TRY(max_pool2(ctx, h, &h)); /* [B, c2, 7, 7] */
    const size_t flat_shape[2] = {batch, d->c2 * (IMG_SIDE / 4) * (IMG_SIDE / 4)};
    TRY(ag_reshape(ctx, h, flat_shape, 2, &h));
    TRY(ag_linear(ctx, h, m->fc1_w, &m->fc1_b, &h));
    TRY(ag_relu(ctx, h, &h));
    if (training && d->dropout > 0.0f) TRY(ag_dropout(ctx, h, d->dropout, dropout_seed, &h));
    return ag_linear(ctx, h, m->fc2_w, &m->fc2_b, logits);
}
