/*
 * nn/init.c - parameter initialisation, in place.
 *
 * Every function fills a tensor from the global Philox generator
 * (awl_tensor_uniform_ / awl_tensor_normal_), so initialisation is
 * reproducible from a seed and identical on every device. The scale rules are
 * PyTorch's torch.nn.init, including how fans are counted (the first axis is
 * the output, the second the input, the rest a receptive field), so a recipe
 * written for PyTorch carries over unchanged.
 */
#include "nn/nn.h"

#include <math.h>

static int check_tensor(const char *op, const awl_tensor *t, int min_ndim)
{
    if (!t) return AWL_ERR_INVALID;
    if (!awl_dtype_is_float(t->dtype))
        return awl_error(AWL_ERR_INVALID, "%s: %s tensors cannot be initialised", op,
                         awl_dtype_name(t->dtype));
    if (t->ndim < min_ndim)
        return awl_error(AWL_ERR_INVALID, "%s: fans need at least %d dimensions, the tensor has %d",
                         op, min_ndim, t->ndim);
    return AWL_OK;
}

static void fans(const awl_tensor *t, double *fan_in, double *fan_out)
{
    double receptive = 1.0;
    for (int d = 2; d < t->ndim; d++) receptive *= (double)t->shape[d];
    *fan_in = (double)t->shape[1] * receptive;
    *fan_out = (double)t->shape[0] * receptive;
}

int awl_init_normal_(awl_tensor *t, double mean, double std)
{
    int status = check_tensor("awl_init_normal_", t, 0);
    return status < 0 ? status : awl_tensor_normal_(t, mean, std);
}

int awl_init_uniform_(awl_tensor *t, double low, double high)
{
    int status = check_tensor("awl_init_uniform_", t, 0);
    return status < 0 ? status : awl_tensor_uniform_(t, low, high);
}

int awl_init_constant_(awl_tensor *t, double value)
{
    int status = check_tensor("awl_init_constant_", t, 0);
    return status < 0 ? status : awl_tensor_fill_(t, value);
}

int awl_init_xavier_uniform_(awl_tensor *t, double gain)
{
    int status = check_tensor("awl_init_xavier_uniform_", t, 2);
    if (status < 0) return status;
    double fan_in, fan_out;
    fans(t, &fan_in, &fan_out);
    double a = gain * sqrt(6.0 / (fan_in + fan_out));
    return awl_tensor_uniform_(t, -a, a);
}

int awl_init_xavier_normal_(awl_tensor *t, double gain)
{
    int status = check_tensor("awl_init_xavier_normal_", t, 2);
    if (status < 0) return status;
    double fan_in, fan_out;
    fans(t, &fan_in, &fan_out);
    return awl_tensor_normal_(t, 0.0, gain * sqrt(2.0 / (fan_in + fan_out)));
}

/* gain / sqrt(fan): the standard deviation both Kaiming variants aim at. */
static double kaiming_std(const awl_tensor *t, double a, awl_fan_mode mode)
{
    double fan_in, fan_out;
    fans(t, &fan_in, &fan_out);
    double gain = sqrt(2.0 / (1.0 + a * a));
    return gain / sqrt(mode == AWL_FAN_IN ? fan_in : fan_out);
}

int awl_init_kaiming_uniform_(awl_tensor *t, double a, awl_fan_mode mode)
{
    int status = check_tensor("awl_init_kaiming_uniform_", t, 2);
    if (status < 0) return status;
    double bound = sqrt(3.0) * kaiming_std(t, a, mode); /* U(-b, b) has std b / sqrt(3) */
    return awl_tensor_uniform_(t, -bound, bound);
}

int awl_init_kaiming_normal_(awl_tensor *t, double a, awl_fan_mode mode)
{
    int status = check_tensor("awl_init_kaiming_normal_", t, 2);
    return status < 0 ? status : awl_tensor_normal_(t, 0.0, kaiming_std(t, a, mode));
}
