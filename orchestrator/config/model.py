"""Schemas of the built-in models (``model=OPTION``) and datasets (``dataset=OPTION``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.config import Schema
from orchestrator.config.fields import option


@dataclass
class ModelConfig(Schema):
    group = "model"

    name: str = option("", "the model builder (model.name)")


@dataclass
class CNNModelConfig(ModelConfig):
    name: str = option("cnn", "the reference study's MNIST CNN: conv-pool-conv-pool-dense-dense")
    conv1: int = option(32, "filters of the first convolution", min=1)
    conv2: int = option(64, "filters of the second convolution", min=1)
    dense: int = option(128, "units of the hidden dense layer", min=1)
    expert_rules: Any = option(factory=lambda: [{"pattern": "conv*", "device": "cpu:0"},
                                                {"pattern": "pool*", "device": "cpu:0"},
                                                {"pattern": "*", "device": "cpu:1"}],
                               help="the manual placer's expert placement of this model on hardware=local (2 logical "
                               "CPU devices): the convolutional blocks on one device, the classifier on the other")


@dataclass
class InceptionV3ModelConfig(ModelConfig):
    name: str = option("inception_v3", "keras.applications.InceptionV3, weights=None (placement only: not trained on MNIST)")
    input_size: int = option(299, "image side in pixels (>= 75)", min=75)
    classes: int = option(1000, "output classes", min=1)


@dataclass
class ResNet50ModelConfig(ModelConfig):
    name: str = option("resnet50", "keras.applications.ResNet50, weights=None (placement only)")
    input_size: int = option(224, "image side in pixels (>= 32)", min=32)
    classes: int = option(1000, "output classes", min=1)


@dataclass
class NMTModelConfig(ModelConfig):
    name: str = option("nmt", "stacked-LSTM encoder-decoder with attention (placement only)")
    layers: int = option(2, "LSTM layers on each side, as in the reference studies", choices=(2, 4, 8))
    vocab: int = option(4000, "vocabulary size", min=1)
    hidden: int = option(128, "LSTM width", min=1)
    seq_len: int = option(16, "tokens per sequence", min=1)


@dataclass
class TransformerModelConfig(ModelConfig):
    name: str = option("transformer", "a Transformer encoder classifier (placement only)")
    vocab: int = option(4000, "vocabulary size", min=1)
    seq_len: int = option(32, "tokens per sequence", min=1)
    d_model: int = option(64, "model width", min=1)
    heads: int = option(4, "attention heads", min=1)
    ff: int = option(128, "feed-forward width", min=1)
    blocks: int = option(2, "encoder blocks", min=1)
    classes: int = option(10, "output classes", min=1)


@dataclass
class KerasModelConfig(ModelConfig):
    extra_keys = True   # the user's factory reads its own keys (+model.classes=5): they are not refused
    name: str = option("keras", "your own model: model.factory=package.module:function")
    factory: str | None = option(None, "function(cfg) or function() returning (keras_model, input_spec); see docs")


@dataclass
class WorkloadModelConfig(ModelConfig):
    name: str = option("workload", "a profiled cost graph in the msr-dnn-partitioning format (placement only)")
    path: str | None = option(None, "the workload file (required)")
    split: str | None = option(None, "its human-expert split file: the manual baseline placement")
    time_unit: str = option("ms", "the unit of the file's latencies and costs: s | ms | us", choices=("s", "ms", "us"))
    host_memory_bytes: float | None = option(None, "host memory shared by the CPU cores (null: unbounded)", gt=0)


@dataclass
class DatasetConfig(Schema):
    group = "dataset"

    name: str = option("", "the dataset (dataset.name)")


@dataclass
class MNISTDatasetConfig(DatasetConfig):
    name: str = option("mnist", "MNIST (IDX files)")
    path: str | None = option(None, "a directory with MNIST IDX files (null: the copy packaged with the tool)")
    test_fraction: float = option(0.2, "used when only one split is present: a seeded train/test split of it", min=0, max=1)
    limit: int | None = option(None, "use only the first N training images", min=1)
    target_accuracy: float = option(0.97, "the test accuracy a training run aims at when train.target_accuracy is null",
                                    min=0, max=1)
    eval_every: int = option(16, "train.eval_every when that is null: batch_size-sample updates between evaluations on "
                             "the whole test split (16 x 64 = 1,024 samples)", min=1)
    budget_updates: int = option(3000, "train.budget_updates when that is auto: the most batch_size-sample updates a run "
                                 "trains (3,000 x 64 = 24 epochs of the packaged 8,000 samples)", min=1)


FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"   # Debian's dataset-fashion-mnist package (MIT)


@dataclass
class FashionMNISTDatasetConfig(MNISTDatasetConfig):
    name: str = option("fashion_mnist", "Fashion-MNIST (Xiao, Rasul, Vollgraf 2017; IDX files, 60,000 / 10,000; a "
                       "harder small workload: train.target_accuracy=0.9)")
    target_accuracy: float = option(0.9, "the test accuracy a training run aims at when train.target_accuracy is null "
                                    "(Shallue et al. 2019's target)", min=0, max=1)
    eval_every: int = option(128, "train.eval_every when that is null: every 128 x 64 = 8,192 samples on the 10,000 test "
                             "samples (an evaluation costs about what 8,000 training samples do)", min=1)
    budget_updates: int = option(30000, "train.budget_updates when that is auto: 30,000 x 64 samples = 32 epochs (one "
                                 "tuned worker reaches 90% in about 5)", min=1)
    path: str | None = option(FASHION_MNIST_DIR, "a directory with the four Fashion-MNIST IDX files (default: where "
                              "Debian's dataset-fashion-mnist installs them)")
