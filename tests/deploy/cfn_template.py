"""deploy/cfn-gpu-serving.yaml as data, for the deploy tests: CloudFormation's short tags
(!Ref, !Sub, !GetAtt...) read as their long forms ({"Ref": ...}, {"Fn::Sub": ...}), which
plain YAML loaders refuse."""
from pathlib import Path

import yaml

TEMPLATE = Path(__file__).resolve().parents[2] / "deploy" / "cfn-gpu-serving.yaml"


class _CfnLoader(yaml.SafeLoader):
    pass


def _long_form(loader, suffix, node):
    name = "Ref" if suffix == "Ref" else "Fn::" + suffix
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


_CfnLoader.add_multi_constructor("!", _long_form)


def load_template() -> dict:
    return yaml.load(TEMPLATE.read_text(), Loader=_CfnLoader)
