// The Keras-style layer: strategies, Trainer.fit, callbacks, datasets, file formats.
// Each part has its own header (the contracts are there); this one includes them all.
#pragma once

#include "chorus/torch.h"
#include "chorus/train/callbacks.h"
#include "chorus/train/checkpoint.h"
#include "chorus/train/dataset.h"
#include "chorus/train/example_proto.h"
#include "chorus/train/idx.h"
#include "chorus/train/metrics.h"
#include "chorus/train/model.h"
#include "chorus/train/ps_strategy.h"
#include "chorus/train/side_evaluator.h"
#include "chorus/train/strategy.h"
#include "chorus/train/tfevents.h"
#include "chorus/train/tfrecord.h"
#include "chorus/train/trainer.h"
