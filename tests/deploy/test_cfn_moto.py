"""Creates deploy/cfn-gpu-serving.yaml's stack against moto (a local AWS emulator) in both modes,
one instance and an Auto Scaling group behind a load balancer, and checks what the stack
built through the EC2 and IAM APIs: the security groups admit the server port from AllowedCidr
(or the load balancer) only and never SSH, the instance role reads that one secret and nothing
else, and the launch template requires IMDSv2 and encrypts its gp3 root volume.

What moto 5.2 does not model, and how this file handles it:
- AWS::SecretsManager::Secret has no CloudFormation support in moto: the small adapter below
  creates the secret in moto's Secrets Manager, so Ref gives a real ARN to check the policy.
- Public SSM parameters (the Deep Learning AMI's /aws/service/... path) are not in moto and
  PutParameter refuses /aws names: the test stores one straight into moto's SSM backend.
- CreationPolicy (cfn-signal) is ignored: the stack completes without signals. The signal path
  is tested by test_user_data.py.
- AWS::EC2::Instance ignores its LaunchTemplate and NetworkInterfaces in moto, so the launch
  template's own settings (IMDSv2, encryption) are checked on the launch template itself, which
  both modes use. Everything runs offline: moto intercepts boto3 in-process.
"""

import ast
import datetime
import json
import urllib.parse

import boto3
import pytest
from cfn_template import TEMPLATE, load_template
from moto import mock_aws
from moto.cloudformation import parsing
from moto.core import DEFAULT_ACCOUNT_ID
from moto.core.common_models import CloudFormationModel
from moto.secretsmanager.models import secretsmanager_backends
from moto.ssm.models import Parameter, ssm_backends

REGION = "us-east-1"
DLAMI_PARAMETER = (
    "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"
)
ALLOWED_CIDR = "203.0.113.0/24"
API_KEY = "moto-test-key-0123456789abcdef"
SERVER_PORT = 8000


class _CfnSecret(CloudFormationModel):
    """AWS::SecretsManager::Secret for moto's CloudFormation: creates the secret in moto's
    Secrets Manager; Ref returns its ARN, as on AWS."""

    # moto files every model class under the service named by its module.
    __module__ = "moto.secretsmanager.models"

    def __init__(self, arn: str):
        self.arn = arn

    @property
    def physical_resource_id(self) -> str:
        return self.arn

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::SecretsManager::Secret"

    @staticmethod
    def cloudformation_name_type() -> str:
        return "Name"

    @classmethod
    def has_cfn_attr(cls, attr: str) -> bool:
        return attr == "Id"

    def get_cfn_attribute(self, attribute_name: str) -> str:
        return self.arn

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name, cloudformation_json, account_id, region_name, **kwargs
    ):
        props = cloudformation_json["Properties"]
        backend = secretsmanager_backends[account_id][region_name]
        created = backend.create_secret(
            name=props.get("Name", resource_name),
            secret_string=props.get("SecretString"),
            secret_binary=None,
            description=props.get("Description"),
            tags=props.get("Tags"),
            kms_key_id=props.get("KmsKeyId"),
            client_request_token=None,
            replica_regions=[],
            force_overwrite=False,
        )
        return cls(json.loads(created)["ARN"])  # moto returns the API's JSON answer

    @classmethod
    def update_from_cloudformation_json(cls, original_resource, *args, **kwargs):
        return original_resource

    @classmethod
    def delete_from_cloudformation_json(cls, *args, **kwargs) -> None:
        return None


# moto maps types to classes once (lru_cache); let it see the adapter.
parsing.get_model_map.cache_clear()
parsing.get_name_type_map.cache_clear()


@pytest.fixture
def aws(monkeypatch):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN",
                "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(var, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with mock_aws():
        ec2 = boto3.client("ec2", region_name=REGION)
        # The AMI id behind the public parameter: any image moto knows.
        ami = ec2.describe_images()["Images"][0]["ImageId"]
        ssm_backends[DEFAULT_ACCOUNT_ID][REGION]._parameters[DLAMI_PARAMETER].append(
            Parameter(account_id=DEFAULT_ACCOUNT_ID, name=DLAMI_PARAMETER, value=ami,
                      parameter_type="String", description=None, allowed_pattern=None,
                      keyid=None, last_modified_date=datetime.datetime.now(), version=1,
                      data_type="aws:ec2:image"))
        vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
        subnets = [
            ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.20.{i}.0/24",
                              AvailabilityZone=f"{REGION}{az}")["Subnet"]["SubnetId"]
            for i, az in enumerate("ab")
        ]
        yield {"vpc": vpc, "subnets": subnets, "ami": ami}


def create_stack(env, capacity: int, certificate: str = "") -> dict:
    cfn = boto3.client("cloudformation", region_name=REGION)
    params = {
        "VpcId": env["vpc"],
        "SubnetIds": ",".join(env["subnets"]),
        "AllowedCidr": ALLOWED_CIDR,
        "ApiKey": API_KEY,
        "SourceRepository": "https://git.example.com/s4kv/s4kv.git",
        "DesiredCapacity": str(capacity),
        "CertificateArn": certificate,
    }
    name = f"s4kv-{capacity}"
    cfn.create_stack(
        StackName=name,
        TemplateBody=TEMPLATE.read_text(),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()],
        Capabilities=["CAPABILITY_IAM"],
    )
    stack = cfn.describe_stacks(StackName=name)["Stacks"][0]
    assert stack["StackStatus"] == "CREATE_COMPLETE", stack.get("StackStatusReason")
    # moto lists the resources a false condition left out as entries without an id.
    resources = {
        r["LogicalResourceId"]: r
        for r in cfn.describe_stack_resources(StackName=name)["StackResources"]
        if "LogicalResourceId" in r
    }
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    return {"name": name, "resources": resources, "outputs": outputs}


def security_group(group_id: str) -> dict:
    ec2 = boto3.client("ec2", region_name=REGION)
    return ec2.describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0]


def ingress(group: dict) -> list[tuple]:
    """(protocol, from, to, source) for every ingress grant of the group."""
    rules = []
    for p in group["IpPermissions"]:
        for r in p.get("IpRanges", []):
            rules.append((p["IpProtocol"], p.get("FromPort"), p.get("ToPort"), r["CidrIp"]))
        for r in p.get("UserIdGroupPairs", []):
            rules.append((p["IpProtocol"], p.get("FromPort"), p.get("ToPort"), r["GroupId"]))
        for r in p.get("Ipv6Ranges", []):
            rules.append((p["IpProtocol"], p.get("FromPort"), p.get("ToPort"), r["CidrIpv6"]))
    return rules


def check_role(stack: dict) -> None:
    iam = boto3.client("iam", region_name=REGION)
    role = stack["resources"]["InstanceRole"]["PhysicalResourceId"]
    secret_arn = stack["resources"]["ApiKeySecret"]["PhysicalResourceId"]
    assert secret_arn.startswith(f"arn:aws:secretsmanager:{REGION}:{DEFAULT_ACCOUNT_ID}:secret:")

    # moto's AWS::IAM::Role drops ManagedPolicyArns (nothing gets attached), so the template
    # itself must attach Session Manager's policy and nothing else.
    attached = iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"]
    assert [p["PolicyArn"] for p in attached] in (
        [], ["arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"])
    role_props = load_template()["Resources"]["InstanceRole"]["Properties"]
    assert role_props["ManagedPolicyArns"] == [
        {"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"}]

    names = iam.list_role_policies(RoleName=role)["PolicyNames"]
    assert names == ["read-api-key"]
    document = iam.get_role_policy(RoleName=role, PolicyName="read-api-key")["PolicyDocument"]
    if isinstance(document, str):
        # moto keeps a CloudFormation-made inline policy as the Python repr of the document.
        text = urllib.parse.unquote(document)
        try:
            document = json.loads(text)
        except json.JSONDecodeError:
            document = ast.literal_eval(text)
    statements = document["Statement"]
    statements = statements if isinstance(statements, list) else [statements]
    assert statements == [{"Effect": "Allow", "Action": "secretsmanager:GetSecretValue",
                           "Resource": secret_arn}]
    for s in statements:
        resources = s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]]
        assert all("*" not in r for r in resources), s

    # The secret holds the key the instances read at boot.
    sm = boto3.client("secretsmanager", region_name=REGION)
    assert sm.get_secret_value(SecretId=secret_arn)["SecretString"] == API_KEY

    trust = iam.get_role(RoleName=role)["Role"]["AssumeRolePolicyDocument"]
    assert [s["Principal"] for s in trust["Statement"]] == [{"Service": "ec2.amazonaws.com"}]


def check_launch_template(stack: dict, scale_out: bool) -> dict:
    ec2 = boto3.client("ec2", region_name=REGION)
    lt_id = stack["resources"]["LaunchTemplate"]["PhysicalResourceId"]
    versions = ec2.describe_launch_template_versions(LaunchTemplateId=lt_id)
    data = versions["LaunchTemplateVersions"][-1]["LaunchTemplateData"]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["MetadataOptions"]["HttpEndpoint"] == "enabled"
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
    [root] = data["BlockDeviceMappings"]
    assert root["DeviceName"] == "/dev/sda1"
    assert root["Ebs"]["Encrypted"] is True
    assert root["Ebs"]["VolumeType"] == "gp3"
    assert root["Ebs"]["VolumeSize"] == 200
    assert data["InstanceType"] == "g6e.xlarge"
    assert "KeyName" not in data  # no SSH key pair: Session Manager only
    profile = stack["resources"]["InstanceProfile"]["PhysicalResourceId"]
    assert data["IamInstanceProfile"]["Arn"].endswith(f":instance-profile/{profile}")
    nics = data.get("NetworkInterfaces", [])
    if scale_out:
        instance_sg = stack["resources"]["InstanceSecurityGroup"]["PhysicalResourceId"]
        assert [n["Groups"] for n in nics] == [[instance_sg]]
    else:
        assert nics == []
    return data


def test_single_instance(aws):
    stack = create_stack(aws, capacity=1)
    res = stack["resources"]
    assert "Instance" in res
    for absent in ("ServerGroup", "LoadBalancer", "Listener", "TargetGroup",
                   "LoadBalancerSecurityGroup"):
        assert absent not in res

    group = security_group(res["InstanceSecurityGroup"]["PhysicalResourceId"])
    assert group["VpcId"] == aws["vpc"]
    assert ingress(group) == [("tcp", SERVER_PORT, SERVER_PORT, ALLOWED_CIDR)]

    check_role(stack)
    data = check_launch_template(stack, scale_out=False)
    assert data["ImageId"] == aws["ami"]

    ec2 = boto3.client("ec2", region_name=REGION)
    instance_id = res["Instance"]["PhysicalResourceId"]
    [reservation] = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    assert reservation["Instances"][0]["ImageId"] == aws["ami"]

    out = stack["outputs"]
    assert out["ApiBaseUrl"].startswith("http://") and out["ApiBaseUrl"].endswith(":8000/v1")
    assert out["HealthUrl"] == out["ApiBaseUrl"][: -len("/v1")] + "/health"
    assert_curl_example(out, API_KEY)


def test_scale_out(aws):
    stack = create_stack(aws, capacity=3)
    res = stack["resources"]
    assert "Instance" not in res
    for present in ("ServerGroup", "LoadBalancer", "Listener", "TargetGroup"):
        assert present in res

    lb_sg = res["LoadBalancerSecurityGroup"]["PhysicalResourceId"]
    instance_sg = res["InstanceSecurityGroup"]["PhysicalResourceId"]
    # The instances admit the load balancer only; the load balancer admits AllowedCidr on its
    # listener port only.
    assert ingress(security_group(instance_sg)) == [("tcp", SERVER_PORT, SERVER_PORT, lb_sg)]
    assert ingress(security_group(lb_sg)) == [("tcp", 80, 80, ALLOWED_CIDR)]

    check_role(stack)
    check_launch_template(stack, scale_out=True)

    asg = boto3.client("autoscaling", region_name=REGION)
    [group] = asg.describe_auto_scaling_groups(
        AutoScalingGroupNames=[res["ServerGroup"]["PhysicalResourceId"]])["AutoScalingGroups"]
    assert (group["MinSize"], group["MaxSize"], group["DesiredCapacity"]) == (3, 3, 3)
    assert group["LaunchTemplate"]["LaunchTemplateId"] == (
        res["LaunchTemplate"]["PhysicalResourceId"])
    assert group["HealthCheckType"] == "ELB"
    assert sorted(group["VPCZoneIdentifier"].split(",")) == sorted(aws["subnets"])

    elb = boto3.client("elbv2", region_name=REGION)
    tg_arn = res["TargetGroup"]["PhysicalResourceId"]
    assert group["TargetGroupARNs"] == [tg_arn]
    [tg] = elb.describe_target_groups(TargetGroupArns=[tg_arn])["TargetGroups"]
    assert (tg["Protocol"], tg["Port"], tg["HealthCheckPath"]) == ("HTTP", SERVER_PORT, "/health")
    [lb] = elb.describe_load_balancers(
        LoadBalancerArns=[res["LoadBalancer"]["PhysicalResourceId"]])["LoadBalancers"]
    assert lb["SecurityGroups"] == [lb_sg]
    assert lb["Scheme"] == "internet-facing"
    [listener] = elb.describe_listeners(LoadBalancerArn=lb["LoadBalancerArn"])["Listeners"]
    assert (listener["Protocol"], listener["Port"]) == ("HTTP", 80)
    assert listener["DefaultActions"][0]["TargetGroupArn"] == tg_arn

    out = stack["outputs"]
    assert out["ApiBaseUrl"] == f"http://{lb['DNSName']}/v1"
    assert out["HealthUrl"] == f"http://{lb['DNSName']}/health"
    assert_curl_example(out, API_KEY)


def test_scale_out_https(aws):
    acm = boto3.client("acm", region_name=REGION)
    cert = acm.request_certificate(DomainName="s4kv.example.com")["CertificateArn"]
    stack = create_stack(aws, capacity=2, certificate=cert)
    res = stack["resources"]
    lb_sg = res["LoadBalancerSecurityGroup"]["PhysicalResourceId"]
    assert ingress(security_group(lb_sg)) == [("tcp", 443, 443, ALLOWED_CIDR)]
    elb = boto3.client("elbv2", region_name=REGION)
    [listener] = elb.describe_listeners(
        LoadBalancerArn=res["LoadBalancer"]["PhysicalResourceId"])["Listeners"]
    assert (listener["Protocol"], listener["Port"]) == ("HTTPS", 443)
    assert listener["Certificates"][0]["CertificateArn"] == cert
    assert stack["outputs"]["ApiBaseUrl"].startswith("https://")


def test_no_ssh_anywhere(aws):
    create_stack(aws, capacity=1)
    create_stack(aws, capacity=3)
    ec2 = boto3.client("ec2", region_name=REGION)
    for group in ec2.describe_security_groups()["SecurityGroups"]:
        for p in group["IpPermissions"]:
            if p["IpProtocol"] == "-1":
                # Only moto's default groups (self-referencing) may allow all protocols.
                assert group["GroupName"] == "default", group
                continue
            assert not (p.get("FromPort", 0) <= 22 <= p.get("ToPort", 65535)), group
    assert not ec2.describe_key_pairs()["KeyPairs"]


def assert_curl_example(outputs: dict, key: str) -> None:
    curl = outputs["CurlExample"]
    base = outputs["ApiBaseUrl"]
    assert curl.startswith(f"curl -s {base}/chat/completions ")
    assert '-H "Authorization: Bearer $S4KV_API_KEY"' in curl
    assert '"model": "Qwen/Qwen2.5-7B-Instruct"' in curl
    assert key not in curl
    assert all(key not in v for v in outputs.values())
